"""The conversation fold: a batch's tool results join one user message after the reply
that called them, whether or not anyone reads the conversation while they arrive; the
fold a live actor keeps (read between results) equals the replay (read at the end)."""

from __future__ import annotations

from halo_actors.core.conversation import (
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    message_chars,
)
from halo_actors.core.events import (
    AgentStarted,
    AssistantReplied,
    Compacted,
    Event,
    Record,
    RoundStarted,
    SessionCreated,
    ToolCalled,
    ToolReturned,
)
from halo_actors.core.state import SessionState, replay

SID = "cli_1700000000000_0badcafe"
WIDTH = 50


def batch(width: int) -> list[Event]:
    uses = tuple(ToolUseBlock(id=f"t{i}", name="read_file") for i in range(width))
    events: list[Event] = [
        SessionCreated(agent_id="default"),
        RoundStarted(text="go", kind="opening"),
        AgentStarted(),
        AssistantReplied(content=uses, stop_reason="tool_use"),
    ]
    events += [ToolCalled(tool_name="read_file", tool_use_id=f"t{i}") for i in range(width)]
    events += [
        ToolReturned(tool_name="read_file", tool_use_id=f"t{i}", result=f"r{i}")
        for i in range(width)
    ]
    return events


def records(events: list[Event]) -> list[Record]:
    return [Record(seq=i, session_id=SID, ts=i, event=e) for i, e in enumerate(events, 1)]


def test_a_batchs_results_join_one_message_however_often_it_is_read_while_they_arrive() -> None:
    stored = records(batch(WIDTH))
    live = SessionState(SID)
    for i, record in enumerate(stored):
        live.apply(record)
        if i % 7 == 0 and live.messages:  # a reader between results (a model call, a history page)
            assert live.messages[-1].content  # read, then the fold goes on
    at_end = replay(SID, stored)
    assert live == at_end
    assert [m.role for m in at_end.messages] == ["user", "assistant", "user"]
    assert at_end.messages[-1].content == tuple(
        ToolResultBlock(tool_use_id=f"t{i}", content=f"r{i}") for i in range(WIDTH)
    )
    measured_afresh = sum(map(message_chars, at_end.messages))
    assert live.context_chars == at_end.context_chars == measured_afresh


def test_a_result_after_a_compaction_joins_the_results_message_the_compaction_kept() -> None:
    events = batch(3)
    events += [Compacted(summary="earlier", replaced=2)]
    events += [ToolReturned(tool_name="read_file", tool_use_id="late", result="after")]
    state = replay(SID, records(events))
    first, last = state.messages[0], state.messages[-1]
    assert first.content == (TextBlock(text="[summary of the earlier conversation]\nearlier"),)
    assert [b.tool_use_id for b in last.content if isinstance(b, ToolResultBlock)] == [
        "t0",
        "t1",
        "t2",
        "late",
    ]
