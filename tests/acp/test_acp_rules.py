"""The adapter's pure rules, for inputs the real server never produces (in-process, no I/O)."""

from __future__ import annotations

from halo_actors.fronts.acp.prompt import compose_prompt
from halo_actors.fronts.acp.settle import RECONNECTED, logged_reply, missing_text
from halo_actors.fronts.acp.turn import backoff_from
from halo_actors.fronts.acp.updates import UpdateBuilder


def test_frames_acp_has_no_update_for_are_dropped() -> None:
    builder = UpdateBuilder()
    frames: list[dict[str, object]] = [
        {"type": "session", "sessionId": "s"},
        {"type": "user", "text": "hi"},
        {"type": "switch", "sessionId": "t"},
        {"type": "queued"},
        {"type": "complete"},
        {"type": "from_the_future", "text": "?"},
        {"no": "type"},
    ]
    for frame in frames:
        assert builder.live(frame) == [], frame


def test_an_id_less_result_pairs_with_the_latest_call_only_when_its_tool_name_matches() -> None:
    builder = UpdateBuilder()
    first = builder.live({"type": "tool_call", "toolName": "grep", "toolUseId": ""})[0]
    second = builder.live({"type": "tool_call", "toolName": "glob"})[0]
    assert first["toolCallId"] != second["toolCallId"]  # both minted, never the same
    mismatched = builder.live({"type": "tool_result", "toolName": "grep", "result": "r1"})
    assert [u["sessionUpdate"] for u in mismatched] == ["tool_call", "tool_call_update"]
    assert mismatched[0]["toolCallId"] not in (first["toolCallId"], second["toolCallId"])
    [paired] = builder.live({"type": "tool_result", "toolName": "glob", "result": "r2"})
    assert paired["toolCallId"] == second["toolCallId"]
    [nameless] = builder.live({"type": "tool_result", "result": "r3"})
    assert nameless["toolCallId"] == first["toolCallId"]
    orphan = builder.live({"type": "tool_result", "toolUseId": "toolu_x", "result": "r4"})
    assert [u["toolCallId"] for u in orphan] == ["toolu_x", "toolu_x"]


def test_minted_ids_differ_between_prompts() -> None:
    ids = {UpdateBuilder().live({"type": "tool_call", "toolName": "t"})[0]["toolCallId"]}
    ids.add(UpdateBuilder().live({"type": "tool_call", "toolName": "t"})[0]["toolCallId"])
    assert len(ids) == 2


def test_the_settle_sends_nothing_the_tail_or_the_whole_reply_behind_the_marker() -> None:
    assert missing_text("abc", "abc") == ""
    assert missing_text("abc", "abcdef") == ""  # the stream went on into a later round
    assert missing_text(None, "x") == ""  # this prompt's round is not in the tail
    assert missing_text("abcdef", "abc") == "def"
    assert missing_text("abcdef", "abXX") == RECONNECTED + "abcdef"


def test_the_logged_reply_is_this_prompts_round_with_media_lines_stripped() -> None:
    rows: list[object] = [
        {"role": "user", "text": "older"},
        {"role": "assistant", "text": "old reply"},
        {"role": "user", "text": "(two messages)\nmine"},
        {"role": "assistant", "text": "one\nMEDIA: out/a.png\n"},
        {"role": "assistant", "text": "  MEDIA: b.txt\ntwo"},
        {"role": "user", "text": "next"},
        {"role": "assistant", "text": "not mine"},
    ]
    assert logged_reply(rows, "mine") == "one\ntwo"
    assert logged_reply(rows, "absent") is None


def test_a_fence_is_longer_than_any_backtick_run_in_the_resource() -> None:
    block = {"type": "resource", "resource": {"uri": "u", "text": "a ``````` b"}}
    assert compose_prompt([block]).message == "[resource: u]\n````````\na ``````` b\n````````"


def test_the_backoff_doubles_five_times() -> None:
    assert backoff_from(1.0) == (1.0, 2.0, 4.0, 8.0, 16.0)
