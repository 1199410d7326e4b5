"""The web page in real Chromium against a real server (``python -m halo_actors serve``).

Few and lean on purpose (each opens a browser page and a server): a person signs in,
chats, spawns sub-sessions and watches the tree grow; interrupts a running command
hard, stops and archives; survives a server restart with nothing missing; and the
page never runs a script found in a message or a tool result.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from chromium import MISSING
from page_driver import WAIT_MS, Person
from playwright.sync_api import expect
from proc_table import live_group_members
from processes import sleep_groups, wait_for
from served import WebServer

if MISSING is not None:
    pytest.skip(MISSING, allow_module_level=True)

XSS_MESSAGE = '<img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script>'
XSS_COMMAND = "echo '<img src=x onerror=window.__xss=3><script>window.__xss=4</script>'"


def _only_the_tree_stream_carries_the_token(person: Person, token: str) -> None:
    carrying = [url for url in person.urls if token in url]
    assert carrying, "the tree stream was opened"
    assert all(re.match(re.escape(person.server.url) + r"/api/web/tree\?", u) for u in carrying)


def test_a_person_chats_spawns_and_watches_the_tree_grow(
    person: Person, server: WebServer, artifacts: Path
) -> None:
    token = server.token()
    person.sign_in(token)
    root = person.new_session()
    expect(person.page.locator("#link")).to_have_text("live", timeout=WAIT_MS)

    person.say("hello there")
    expect(person.entries("assistant").last).to_contain_text("Done: hello there", timeout=WAIT_MS)
    person.wait_state(root, "idle")

    person.say("spawn 3 check the docs")
    expect(person.nodes()).to_have_count(4, timeout=WAIT_MS)
    for label in ("worker1", "worker2", "worker3"):
        expect(person.page.locator("#tree .node-label", has_text=label)).to_have_count(1)
    reports = person.page.locator("#transcript .entry.report")
    for part in (1, 2, 3):  # every child reported (reports arriving together share a round)
        expect(reports).to_contain_text([f"part {part} of 3"], timeout=WAIT_MS)
    person.wait_state(root, "idle")
    person.shot(artifacts / "page-1280x800.png")

    person.page.locator("#tree .node-button", has_text="worker1").click()
    expect(person.page.locator("#chat-title")).to_have_text("worker1")
    expect(person.entries("task").first).to_contain_text("check the docs (part 1 of 3)")

    person.page.set_viewport_size({"width": 390, "height": 844})
    person.nodes().first.locator("button").click()
    expect(person.page.locator("#transcript")).to_be_visible()
    person.shot(artifacts / "page-phone-390.png")
    wide = person.page.evaluate("document.documentElement.scrollWidth")
    assert wide <= 390, f"the page is {wide}px wide at phone width"
    _only_the_tree_stream_carries_the_token(person, token)
    assert person.body("duplicates") == "0"
    assert person.violations() == []


def test_a_hard_interrupt_kills_a_running_sleep_then_stop_and_archive(
    person: Person, server: WebServer
) -> None:
    """Rules: hard interrupt = now, killing the running command's process group; a node
    shows its queued messages; stop (preserving them) and archive ask for confirmation;
    an archived session leaves the list."""
    person.sign_in(server.token())
    root = person.new_session()
    person.say("run sleep 97 && echo never")
    person.wait_state(root, "in tool")
    expect(person.node(root)).to_contain_text("shell_exec: sleep 97 && echo never")
    expect(person.page.locator("#transcript [data-pending=true]")).to_have_count(1)
    (pgid,) = wait_for(lambda: sleep_groups(server, "97"))
    person.page.click("#interrupt-hard")
    expect(person.page.locator("#transcript .tool-output").last).to_have_text(
        "[interrupted by user]", timeout=WAIT_MS
    )
    person.wait_state(root, "idle")
    wait_for(lambda: not live_group_members(pgid))

    person.say("count to 40")
    person.wait_state(root, "running")
    person.say("and then this")  # busy: queued (the count has no batch boundary)
    expect(person.node(root)).to_contain_text("queued 1", timeout=WAIT_MS)
    person.page.click("#stop")
    person.confirm()
    person.wait_state(root, "stopped")
    expect(person.node(root)).not_to_contain_text("queued")
    expect(person.entries("user").last).to_have_text(  # stop keeps it, folded into history
        "you (queued, folded in by a stop)and then this"
    )

    person.page.click("#archive")
    expect(person.page.locator("#confirm-text")).to_contain_text("Archive this session")
    person.page.click("#confirm-cancel")  # a second thought: nothing happens
    expect(person.page.locator("#archive")).to_be_enabled()
    person.page.click("#archive")
    person.confirm()
    person.wait_state(root, "archived")
    expect(person.page.locator("#session-list .session")).to_have_count(0, timeout=WAIT_MS)
    assert person.violations() == []


def test_after_a_server_restart_the_page_catches_up_with_nothing_missing(
    person: Person, server: WebServer
) -> None:
    """Rule: a dropped connection resumes with no gap and no duplicate."""
    person.sign_in(server.token())
    root = person.new_session()
    person.say("count to 40")
    expect(person.entries("assistant").last).to_contain_text("3", timeout=WAIT_MS)
    server.stop()  # the running turn is closed by the shutdown, after the stream ended
    expect(person.page.locator("#link")).to_have_text("reconnecting…", timeout=WAIT_MS)
    server.start()
    expect(person.page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
    expect(person.entries("error")).to_contain_text(["stopped this run"], timeout=WAIT_MS)
    person.say("after the restart")
    expect(person.entries("assistant").last).to_contain_text(
        "Done: after the restart", timeout=WAIT_MS
    )
    person.wait_state(root, "idle")  # the run is over: the log holds the whole tree now
    records = server.records(root)  # read-only, beside the running server
    body = person.page.locator("body")
    expect(body).to_have_attribute("data-records", str(len(records)), timeout=WAIT_MS)
    expect(body).to_have_attribute("data-last-seq", str(records[-1].seq))
    assert person.body("duplicates") == "0"


def test_markup_in_a_message_and_a_tool_result_runs_no_script(
    person: Person, server: WebServer
) -> None:
    """Rule: model and tool output is rendered as text, never as HTML (strict CSP too)."""
    person.sign_in(server.token())
    root = person.new_session()
    person.say(XSS_MESSAGE)
    expect(person.entries("assistant").last).to_contain_text("Done: <img src=x", timeout=WAIT_MS)
    person.wait_state(root, "idle")
    person.say(f"run {XSS_COMMAND}")
    expect(person.page.locator("#transcript .tool-output").last).to_contain_text(
        "<script>window.__xss=4</script>", timeout=WAIT_MS
    )
    person.wait_state(root, "idle")
    expect(person.entries("user").first).to_have_text("you" + XSS_MESSAGE)
    transcript = person.page.locator("#transcript")
    assert transcript.locator("img").count() == 0
    assert transcript.locator("script").count() == 0
    assert person.page.evaluate("typeof window.__xss") == "undefined"
    assert person.violations() == []


FOLD_CHECK = """
async () => {
  const { Tree } = await import("/web/fold.js");
  const { TranscriptView, drawTree } = await import("/web/view.js");
  const root = "web_alice_f", child = "web_alice_f>w1_x";
  const events = [
    [root, { type: "session_created", agentId: "default" }],
    [root, { type: "message_queued", text: "go" }],
    [root, { type: "user", text: "go", drained: 1 }],
    [root, { type: "agent_start" }],
    [root, { type: "thinking", text: "pondering <b>bold</b>" }],
    [root, { type: "stream", text: "Hello " }],
    [root, { type: "stream", text: "world" }],
    [root, { type: "tool_call", toolName: "shell_exec", toolUseId: "a1", toolInput: { command: "ls" } }],
    [root, { type: "tool_call", toolName: "shell_exec", toolUseId: "", toolInput: { command: "pwd" } }],
    [root, { type: "tool_call", toolName: "shell_exec", toolUseId: "c1", toolInput: { command: "id" } }],
    [root, { type: "tool_result", toolName: "shell_exec", toolUseId: "c1", result: "uid=0" }],
    [root, { type: "tool_result", toolName: "shell_exec", toolUseId: "", result: "x", uiResult: "first" }],
    [root, { type: "message_queued", text: "more" }],
    [child, { type: "session_created", agentId: "default", parentId: root, title: "w1" }],
    [child, { type: "user", text: "(from: session p) task", fromSessionIds: [root] }],
  ];
  const tree = new Tree();
  events.forEach(([sessionId, event], i) => tree.apply({ seq: i + 1, sessionId, ts: 0, event }));
  const midway = { state: tree.nodes.get(root).state, tool: tree.nodes.get(root).tool,
                   queued: tree.nodes.get(root).mailbox };
  tree.apply({ seq: 50, sessionId: root, ts: 0, event: { type: "tool_result", toolUseId: "z", result: "last" } });
  tree.apply({ seq: 51, sessionId: root, ts: 0, event: { type: "complete" } });
  tree.apply({ seq: 52, sessionId: root, ts: 0, event: { type: "user", text: "(from: session c) done", drained: 1, fromSessionIds: [child] } });
  const list = document.createElement("ol");
  new TranscriptView(list).draw(tree.nodes.get(root));
  const taskList = document.createElement("ol");
  new TranscriptView(taskList).draw(tree.nodes.get(child));
  const treeList = document.createElement("ul");
  drawTree(treeList, tree, root, () => {});
  const details = list.querySelector("details.thinking");
  return {
    midway,
    kinds: [...list.children].map((li) => li.dataset.kind),
    thinkingOpen: details.open,
    thinking: details.textContent,
    reply: list.querySelector(".entry.assistant > .text").textContent,
    outputs: [...list.querySelectorAll(".tool-output")].map((o) => o.textContent),
    taskKinds: [...taskList.children].map((li) => li.dataset.kind),
    rows: [...treeList.children].map((li) => [li.dataset.sessionId, li.dataset.state]),
    elements: list.querySelectorAll("b").length,
  };
}
"""


def test_the_transcript_folds_thinking_pairs_results_and_tells_tasks_from_reports(
    person: Person, server: WebServer
) -> None:
    """Rules (the page's fold, fed records directly): thinking is folded; a result goes to
    the call with its id, else to the first call still waiting; pending calls are marked;
    a node is ``in tool`` with its command and ``queued N``; a parent's message is a task,
    a child's a report."""
    person.page.goto(server.url + "/")
    got = person.page.evaluate(FOLD_CHECK)
    assert got["midway"] == {"state": "in tool", "tool": "shell_exec: pwd", "queued": 1}
    assert got["kinds"] == ["user", "assistant", "tool", "tool", "tool", "report"]
    assert got["thinkingOpen"] is False and got["thinking"] == "thinkingpondering <b>bold</b>"
    assert got["reply"] == "Hello world"
    assert got["outputs"] == ["first", "last", "uid=0"]
    assert got["taskKinds"] == ["task"]
    assert got["rows"] == [["web_alice_f", "idle"], ["web_alice_f>w1_x", "idle"]]
    assert got["elements"] == 0
