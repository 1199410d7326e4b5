"""session/new, session/list and session/load (history replay) against the real server."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
import trio
from acp_harness import Message, Rig, at, text_at
from sandbox_check import needs_sandbox

from halo_actors.fronts.http.limits import TokenLimits

LIVE_PROMPTS = ("think", "tools", "bigtool", "media", "fail")


async def test_session_new_mints_the_id_on_the_server_and_ignores_cwd_and_mcp_servers(
    rig: Rig,
) -> None:
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            params: Message = {
                "cwd": "/somewhere/else",
                "mcpServers": [{"name": "x", "command": "y"}],
            }
            result = await agent.result("session/new", params)
            sup = await rig.sup()
    assert isinstance(result, dict) and list(result) == ["sessionId"]
    session_id = str(result["sessionId"])
    assert session_id.startswith("web_alice_")
    assert sup.exists(session_id)
    [seen] = rig.proxy.requests("/api/web/sessions")
    assert seen.method == "POST"


async def test_session_list_gives_the_tokens_sessions_with_workspace_cwd_and_iso_times(
    rig: Rig,
) -> None:
    workspace = str(rig.harness.workspace.resolve())
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            first = await agent.new_session()
            second = await agent.new_session()
            listed = await agent.result("session/list", {})
            same_cwd = await agent.result("session/list", {"cwd": workspace + "/"})
            other_cwd = await agent.result("session/list", {"cwd": str(rig.tmp)})
    assert isinstance(listed, dict)
    sessions = listed["sessions"]
    assert isinstance(sessions, list)
    assert {s["sessionId"] for s in sessions} == {first, second}
    for entry in sessions:
        assert set(entry) == {"sessionId", "cwd", "updatedAt"}  # no title yet: left out
        assert entry["cwd"] == workspace
        assert datetime.fromisoformat(entry["updatedAt"]).tzinfo is not None
    assert "nextCursor" not in listed
    assert same_cwd == listed
    assert other_cwd == {"sessions": []}


async def test_session_list_pages_with_the_servers_opaque_digit_cursor(rig: Rig) -> None:
    token = rig.token()
    with trio.fail_after(20):
        async with rig.harness.client(token) as client:
            for _ in range(51):
                assert (await client.post("/api/web/sessions")).status_code == 200
        async with rig.adapter(token=token) as agent:
            page = await agent.result("session/list", {})
            assert isinstance(page, dict)
            cursor = page["nextCursor"]
            rest = await agent.result("session/list", {"cursor": cursor})
            bad = await agent.request("session/list", {"cursor": "yesterday"})
            not_text = await agent.request("session/list", {"cursor": 12})
    assert isinstance(cursor, str) and cursor.isdigit()
    assert isinstance(rest, dict) and "nextCursor" not in rest
    ids = [s["sessionId"] for s in page["sessions"] + rest["sessions"]]
    assert len(ids) == len(set(ids)) == 51
    assert at(bad, "error", "code") == -32602
    assert at(not_text, "error", "code") == -32602
    assert len(rig.proxy.requests("/api/web/sessions")) == 2  # the bad cursors never left


async def test_session_load_of_an_unknown_or_foreign_session_is_32602(rig: Rig) -> None:
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            unknown = await agent.request(
                "session/load", {"sessionId": "web_alice_0_nope", "cwd": "/", "mcpServers": []}
            )
            foreign = await agent.request(
                "session/load", {"sessionId": "web_bob_0_theirs", "cwd": "/", "mcpServers": []}
            )
            prompt = await agent.request(
                "session/prompt",
                {"sessionId": "web_alice_0_nope", "prompt": [{"type": "text", "text": "hi"}]},
            )
    assert at(unknown, "error", "code") == -32602
    assert "session not found" in text_at(unknown, "error", "message")
    assert at(foreign, "error", "code") == -32602
    assert at(prompt, "error", "code") == -32602  # not registered


@pytest.mark.parametrize("rig", [TokenLimits(history_limit=3)], indirect=True)
async def test_session_load_replays_a_history_longer_than_one_page(rig: Rig) -> None:
    """``history`` is paged: ``session/load`` follows ``nextBefore`` to the oldest row."""
    with trio.fail_after(20):
        async with rig.adapter() as live:
            session_id = await live.new_session()
            for text in LIVE_PROMPTS:
                assert (await live.prompt(session_id, text))["result"] == {"stopReason": "end_turn"}
        async with rig.adapter() as fresh:
            assert await fresh.result("session/load", {"sessionId": session_id}) == {}
            replayed = fresh.updates(session_id)
    users = [
        at(u, "content", "text") for u in replayed if u["sessionUpdate"] == "user_message_chunk"
    ]
    assert users == list(LIVE_PROMPTS)  # 10+ rows, 3 a page
    assert len(rig.proxy.requests("/api/web/history")) >= 4


@needs_sandbox()
async def test_session_load_replays_the_whole_history_before_answering(rig: Rig) -> None:
    with trio.fail_after(20):
        async with rig.adapter() as live:
            session_id = await live.new_session()
            for text in LIVE_PROMPTS:
                assert (await live.prompt(session_id, text))["result"] == {"stopReason": "end_turn"}
        live_calls = [u for u in live.updates(session_id) if u["sessionUpdate"] == "tool_call"]
        live_done = {
            u["toolCallId"]: u
            for u in live.updates(session_id)
            if u["sessionUpdate"] == "tool_call_update"
        }
        async with rig.adapter() as fresh:
            request_id = await fresh.start(
                "session/load", {"sessionId": session_id, "cwd": "/", "mcpServers": []}
            )
            assert (await fresh.answer(request_id))["result"] == {}
            position = fresh.position(request_id)
            replayed = fresh.updates(session_id)
            assert fresh.updates(session_id, before=position) == replayed  # all before `{}`
            # the id is registered: a prompt works on it now
            assert (await fresh.prompt(session_id, "think"))["result"] == {"stopReason": "end_turn"}

    kinds = [u["sessionUpdate"] for u in replayed]
    users = [
        at(u, "content", "text") for u in replayed if u["sessionUpdate"] == "user_message_chunk"
    ]
    assert users == list(LIVE_PROMPTS)
    assert kinds[:3] == ["user_message_chunk", "agent_thought_chunk", "agent_message_chunk"]
    assert "tool_call_update" not in kinds  # replayed calls are self-contained
    calls = [u for u in replayed if u["sessionUpdate"] == "tool_call"]
    assert [c["toolCallId"] for c in calls] == [c["toolCallId"] for c in live_calls]
    for call, live_call in zip(calls, live_calls, strict=True):
        assert call["title"] == live_call["title"] and call["kind"] == live_call["kind"]
        assert call["rawInput"] == live_call["rawInput"]
        assert call["status"] == "completed"
        output = live_done[call["toolCallId"]]["rawOutput"]
        assert call["rawOutput"] == output
        assert call["content"] == [{"type": "content", "content": {"type": "text", "text": output}}]
    assert max(len(str(c["rawOutput"])) for c in calls) == 500  # `seq 1 400`, capped
    messages = "".join(
        text_at(u, "content", "text")
        for u in replayed
        if u["sessionUpdate"] == "agent_message_chunk"
    )
    # a failed model call logs no reply, only its error row
    replies = "thought" + "all tools ran" + "ok" + "Here it is:\n[file: out/report.txt]\nDone.\n"
    assert messages == replies + "[error] model error: the model gave up"


async def test_replay_skips_deleted_sub_agent_system_and_standalone_tool_rows(rig: Rig) -> None:
    """An older server's history shapes, served by the proxy in place of the real one."""
    rows = [
        {"id": 1, "role": "user", "text": "kept"},
        {"id": 2, "role": "user", "text": "gone", "deleted": True},
        {"id": 3, "role": "assistant", "text": "child says", "taskId": "t1", "contentBlocks": []},
        *({"id": 4, "role": role, "text": role} for role in ("system", "usage", "agent_done")),
        {"id": 5, "role": "tool_call", "toolName": "file_read"},
        {"id": 6, "role": "tool_result", "text": "out"},
        {
            "id": 7,
            "role": "assistant",
            "text": "legacy text",
            "toolCalls": [
                {"id": "", "name": "shell_exec", "input": {"command": "ls"}, "output": "a\nb"},
                {"toolUseId": "toolu_9", "toolName": "grep", "input": {"pattern": "x"}},
            ],
        },
    ]
    body = {"sessionId": "web_alice_1_old", "messages": rows, "running": False}
    rig.proxy.answer("/api/web/history", json.dumps(body).encode())
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            loaded = await agent.request(
                "session/load", {"sessionId": "web_alice_1_old", "cwd": "/", "mcpServers": []}
            )
    assert loaded["result"] == {}
    replayed = agent.updates("web_alice_1_old")
    assert [u["sessionUpdate"] for u in replayed] == [
        "user_message_chunk",
        "tool_call",
        "tool_call",
        "agent_message_chunk",
    ]
    assert replayed[0]["content"] == {"type": "text", "text": "kept"}
    first, second = replayed[1], replayed[2]
    assert first["toolCallId"] == "replay-7-0" and first["title"] == "shell_exec ls"
    assert first["kind"] == "execute" and first["rawOutput"] == "a\nb"
    assert second["toolCallId"] == "toolu_9" and second["kind"] == "search"
    assert replayed[3]["content"] == {"type": "text", "text": "legacy text"}
