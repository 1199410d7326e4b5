"""Interoperability: the official ACP Python SDK, as a client, against the real adapter.

``sdk_client.py`` (asyncio, run as a subprocess) drives two adapter processes
through ``agent-client-protocol`` (pinned in the ``test`` extra) and prints a
summary; this test checks it. Any mismatch it finds is one a conforming
third-party client would hit. The summary's ``mismatches``, ``sdkLog`` and
``warnings`` prove that the SDK's schema accepted every message unchanged.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from pathlib import Path

import trio
from acp_harness import Rig, at
from sandbox_check import needs_sandbox
from sdk_client import PNG

CLIENT = Path(__file__).with_name("sdk_client.py")
JsonObj = dict[str, object]
Updates = list[dict[str, object]]


def _kinds(updates: Updates) -> list[object]:
    return [u["sessionUpdate"] for u in updates]


def _text(updates: Updates, kind: str = "agent_message_chunk") -> str:
    return "".join(str(at(u, "content", "text")) for u in updates if u["sessionUpdate"] == kind)


def _collapse(kinds: list[object]) -> list[object]:
    """Runs of one kind as one entry: the shape of a reply, whatever the chunking."""
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]


async def _run_client(rig: Rig, workspace: str) -> JsonObj:
    env = {**os.environ, "HALO_ACTORS_TOKEN": rig.token()}
    command = [sys.executable, str(CLIENT), "--port", str(rig.proxy.port)]
    command += ["--workspace", workspace, "--stderr-dir", str(rig.tmp)]
    done = await trio.run_process(
        command, env=env, capture_stdout=True, capture_stderr=True, check=False
    )
    stderr = done.stderr.decode(errors="replace")
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 1, (done.returncode, lines, stderr)
    summary: JsonObj = json.loads(lines[0])
    assert done.returncode == 0, (summary.get("error"), stderr)
    return summary


@needs_sandbox()
async def test_the_official_sdk_client_drives_the_adapter(rig: Rig) -> None:
    workspace = str(rig.harness.workspace.resolve())
    with trio.fail_after(40):
        summary = await _run_client(rig, workspace)
        sessions = summary["sessions"]
        assert isinstance(sessions, list)
        first_id, second_id = sessions
        async with rig.harness.client(rig.token()) as http:
            history = await http.get("/api/web/history", params={"sessionId": first_id})

    # the SDK's schema took every message, unchanged, and dropped no update
    assert summary["mismatches"] == []
    assert summary["sdkLog"] == [] and summary["warnings"] == []
    assert summary["updatesArrived"] == summary["updatesDelivered"] != 0
    assert summary["unexpectedClientCalls"] == []

    init = summary["initialize"]
    assert isinstance(init, dict)
    assert init["protocolVersion"] == 1
    assert init["agentInfo"]["name"] == "halo_actors"
    capabilities = init["agentCapabilities"]
    assert capabilities["loadSession"] is True
    assert capabilities["sessionCapabilities"] == {"list": {}}
    assert capabilities["promptCapabilities"] == {
        "image": True,
        "audio": False,
        "embeddedContext": True,
    }

    prompts = summary["prompts"]
    assert isinstance(prompts, dict)
    assert first_id != second_id

    # a resource, an image and text, as the SDK builds them, reached the server as one message
    hello = prompts["hello"]
    assert hello["stopReason"] == "end_turn"
    assert _text(hello["updates"]) == "Done: hello"
    assert set(_kinds(hello["updates"])) == {"agent_message_chunk"}
    [user_row, *_] = [r for r in history.json()["messages"] if r["role"] == "user"]
    assert user_row["text"].startswith("[resource: file:///notes.md]\n```\nsome notes\n```")
    assert user_row["text"].endswith("\n\nhello")
    assert user_row["images"] == [f"data:image/png;base64,{PNG}"]

    # a tool call: started, then completed, between the two texts
    run = prompts["run echo hi"]
    assert run["stopReason"] == "end_turn"
    assert _collapse(_kinds(run["updates"])) == [
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    assert _text(run["updates"]) == "Running `echo hi`.\nThe command finished; its output is above."
    [call] = [u for u in run["updates"] if u["sessionUpdate"] == "tool_call"]
    [done] = [u for u in run["updates"] if u["sessionUpdate"] == "tool_call_update"]
    assert call["kind"] == "execute" and call["status"] == "in_progress"
    assert call["title"] == "shell_exec echo hi"
    assert call["rawInput"] == {"command": "echo hi"}
    assert done["toolCallId"] == call["toolCallId"]
    assert done["status"] == "completed"
    assert "hi" in done["rawOutput"]
    assert done["content"] == [
        {"type": "content", "content": {"type": "text", "text": done["rawOutput"]}}
    ]

    think = prompts["think"]
    assert think["stopReason"] == "end_turn"
    assert _text(think["updates"], "agent_thought_chunk") == "hmm"
    assert _text(think["updates"]) == "thought"

    # cancelled once its tool call showed: the stop reached the server, and the interrupted
    # tool row was delivered by the time the prompt answered
    cancelled = prompts["cancelled"]
    assert cancelled["stopReason"] == "cancelled"
    [stop] = rig.proxy.requests("/api/web/stop")
    assert json.loads(stop.body)["sessionId"] == second_id
    [sleep] = [u for u in cancelled["updates"] if u["sessionUpdate"] == "tool_call"]
    assert sleep["title"] == "shell_exec sleep 30"
    [interrupted] = [u for u in cancelled["updates"] if u["sessionUpdate"] == "tool_call_update"]
    assert interrupted["toolCallId"] == sleep["toolCallId"]
    assert interrupted["rawOutput"] == "[interrupted by user]"

    listed = summary["list"]
    assert isinstance(listed, dict)
    by_id = {s["sessionId"]: s for s in listed["sessions"]}
    assert {first_id, second_id} <= by_id.keys()
    for entry in by_id.values():
        assert entry["cwd"] == workspace
        datetime.fromisoformat(entry["updatedAt"])

    assert at(summary, "unknownSession", "code") == -32602

    # a fresh adapter loads the first session: the replay is the conversation, and a tool
    # call looks as it did live
    load = summary["load"]
    assert isinstance(load, dict)
    assert load["answer"] == {}
    replay = load["updates"]
    users = [u["content"]["text"] for u in replay if u["sessionUpdate"] == "user_message_chunk"]
    assert users == [user_row["text"], "run echo hi", "think"]
    live = [*hello["updates"], *run["updates"], *think["updates"]]
    assert _text(replay) == _text(live)
    assert _text(replay, "agent_thought_chunk") == "hmm"
    [replayed] = [u for u in replay if u["sessionUpdate"] == "tool_call"]
    assert {k: replayed[k] for k in ("toolCallId", "title", "kind", "rawInput")} == {
        k: call[k] for k in ("toolCallId", "title", "kind", "rawInput")
    }
    assert replayed["status"] == "completed"
    assert replayed["rawOutput"] == done["rawOutput"]

    after = prompts["after load"]
    assert after["stopReason"] == "end_turn"
    assert _text(after["updates"]) == "Done: hello again"

    # both adapters exited by themselves once the SDK closed their stdin
    assert summary["adapterExits"] == [0, 0]
    logs = sorted(rig.tmp.glob("sdk-adapter-*.stderr"))
    assert len(logs) == 2
    for path in logs:
        assert "Traceback" not in path.read_text(), path
