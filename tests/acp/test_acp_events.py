"""The event mapping: each server frame type → its ACP ``session/update`` (or nothing)."""

from __future__ import annotations

import trio
from acp_harness import LONG_COMMAND, AdapterProcess, Rig, at
from sandbox_check import needs_sandbox

END_TURN = {"stopReason": "end_turn"}


async def _one_prompt(rig: Rig, text: str) -> tuple[AdapterProcess, str, dict[str, object]]:
    async with rig.adapter() as agent:
        session_id = await agent.new_session()
        answer = await agent.prompt(session_id, text)
    return agent, session_id, answer


def _kinds(agent: AdapterProcess, session_id: str) -> list[object]:
    return [u["sessionUpdate"] for u in agent.updates(session_id)]


async def test_stream_frames_become_agent_message_chunks_and_the_user_echo_is_dropped(
    rig: Rig,
) -> None:
    with trio.fail_after(10):
        agent, session_id, answer = await _one_prompt(rig, "slow 3")
    assert answer["result"] == END_TURN
    assert set(_kinds(agent, session_id)) == {"agent_message_chunk"}
    assert agent.text(session_id) == "1\n2\n3\n"
    for update in agent.updates(session_id):
        content = update["content"]
        assert isinstance(content, dict) and set(content) == {"type", "text"}


async def test_thinking_frames_become_agent_thought_chunks(rig: Rig) -> None:
    with trio.fail_after(10):
        agent, session_id, answer = await _one_prompt(rig, "think")
    assert answer["result"] == END_TURN
    assert _kinds(agent, session_id) == ["agent_thought_chunk", "agent_message_chunk"]
    assert agent.text(session_id, "agent_thought_chunk") == "hmm"


async def test_tool_calls_carry_id_title_kind_and_raw_input_and_results_pair_by_id(
    rig: Rig,
) -> None:
    with trio.fail_after(15):
        agent, session_id, answer = await _one_prompt(rig, "tools")
    assert answer["result"] == END_TURN
    updates = agent.updates(session_id)
    calls = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    done = [u for u in updates if u["sessionUpdate"] == "tool_call_update"]
    shown = {str(c["title"]): c["kind"] for c in calls}
    assert shown == {
        "file_write notes.txt": "edit",
        "file_read notes.txt": "read",
        "glob *.txt": "search",
        "grep hel+o": "search",
        "file_list .": "search",
        "file_edit notes.txt": "edit",
        "web_fetch https://example.org/": "fetch",
        "mystery_tool": "other",
    }
    for call in calls:
        assert str(call["toolCallId"]).startswith("toolu_")
        assert call["status"] == "in_progress"
        assert "locations" not in call
    assert calls[0]["rawInput"] == {"path": "notes.txt", "content": "hello"}
    assert sorted(str(d["toolCallId"]) for d in done) == sorted(str(c["toolCallId"]) for c in calls)
    for update in done:
        assert update["status"] == "completed"
        text = at(update, "content", 0, "content", "text")
        assert update["rawOutput"] == text
    by_id = {d["toolCallId"]: d["rawOutput"] for d in done}
    assert by_id[calls[0]["toolCallId"]] == "wrote 5 bytes to notes.txt"
    for call in calls:  # each result comes after its own call
        assert updates.index(call) < next(
            i
            for i, u in enumerate(updates)
            if u.get("toolCallId") == call["toolCallId"] and u is not call
        )


async def test_a_tool_title_takes_the_first_80_characters_of_its_argument(rig: Rig) -> None:
    with trio.fail_after(10):
        agent, session_id, _ = await _one_prompt(rig, "long")
    [call] = [u for u in agent.updates(session_id) if u["sessionUpdate"] == "tool_call"]
    assert call["title"] == f"shell_exec {LONG_COMMAND[:80]}"
    assert call["kind"] == "execute"
    assert call["rawInput"] == {"command": LONG_COMMAND}


async def test_an_empty_tool_use_id_gets_a_minted_id_and_its_result_pairs_with_the_latest_call(
    rig: Rig,
) -> None:
    with trio.fail_after(10):
        agent, session_id, answer = await _one_prompt(rig, "blank")
    assert answer["result"] == END_TURN
    call, done = [u for u in agent.updates(session_id) if "toolCallId" in u]
    assert call["sessionUpdate"] == "tool_call" and done["sessionUpdate"] == "tool_call_update"
    assert str(call["toolCallId"]).startswith("call-")
    assert done["toolCallId"] == call["toolCallId"]
    assert done["status"] == "completed" and "notes" not in str(done["rawOutput"])


async def test_a_file_frame_becomes_a_file_line_in_the_message(rig: Rig) -> None:
    with trio.fail_after(10):
        agent, session_id, answer = await _one_prompt(rig, "media")
    assert answer["result"] == END_TURN
    assert agent.text(session_id) == "Here it is:\n[file: out/report.txt]\nDone.\n"


async def test_an_error_frame_becomes_an_error_line_and_ends_the_turn(rig: Rig) -> None:
    with trio.fail_after(10):
        agent, session_id, answer = await _one_prompt(rig, "fail")
    assert answer["result"] == END_TURN
    assert agent.text(session_id) == "partial [error] model error: the model gave up"


@needs_sandbox()
async def test_switch_frames_and_keepalives_are_dropped(rig: Rig) -> None:
    with trio.fail_after(15):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            switched = await agent.prompt(session_id, "/session new")
            slow = await agent.prompt(session_id, "run sleep 0.6")
    assert switched["result"] == slow["result"] == END_TURN
    assert rig.proxy.keepalives >= 1  # the server sent some while the command ran
    # `/session new` answered session, switch, complete: nothing to show
    kinds = _kinds(agent, session_id)
    assert kinds == [
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    assert agent.text(session_id) == (
        "Running `sleep 0.6`.\nThe command finished; its output is above."
    )
