"""The demo's tree picture is the runtime's own fold: states as a person reads them."""

from __future__ import annotations

from halo_actors.core.events import (
    AgentStarted,
    Event,
    MessageQueued,
    Record,
    SessionArchived,
    SessionCreated,
    SessionStopped,
    TextStreamed,
    ToolCalled,
    ToolReturned,
)
from halo_actors.demo.board import Board
from halo_actors.demo.feed import plain_line

ROOT = "demo_1_aaaa"
CHILD = f"{ROOT}>worker_bbb"


def board_of(*events: tuple[str, Event]) -> Board:
    board = Board()
    for seq, (sid, event) in enumerate(events, start=1):
        board.apply(Record(seq=seq, session_id=sid, ts=seq, event=event))
    return board


def test_rows_name_sessions_by_title_path_and_show_their_state() -> None:
    board = board_of(
        (ROOT, SessionCreated(agent_id="lead", title="lead")),
        (CHILD, SessionCreated(agent_id="worker", parent_id=ROOT, title="docs")),
        (ROOT, AgentStarted()),
        (ROOT, TextStreamed(text="thinking out loud")),
        (ROOT, MessageQueued(text="one more thing")),
        (CHILD, AgentStarted()),
        (CHILD, ToolCalled(tool_name="shell_exec", tool_use_id="t1", tool_input={"command": "ls"})),
    )
    root, child = board.rows()
    assert (root.name, root.state, root.queued, root.saying) == (
        "lead",
        "running",
        1,
        "thinking out loud",
    )
    assert (child.name, child.depth, child.state, child.tool) == (
        "lead>docs",
        1,
        "in tool",
        "shell_exec: ls",
    )


def test_stopped_and_archived_sessions_show_their_lifecycle() -> None:
    board = board_of(
        (ROOT, SessionCreated(agent_id="lead", title="lead")),
        (CHILD, SessionCreated(agent_id="worker", parent_id=ROOT, title="docs")),
        (ROOT, SessionStopped()),
        (CHILD, SessionArchived()),
    )
    assert [(r.label, r.state) for r in board.rows()] == [("lead", "stopped"), ("docs", "archived")]


def test_a_plain_line_shows_the_person_facing_result_of_a_cut_call() -> None:
    record = Record(
        seq=7,
        session_id=CHILD,
        ts=1,
        event=ToolReturned(
            tool_name="shell_exec", tool_use_id="t1", result="[interrupted] …", ui_result="[x]"
        ),
    )
    assert (
        plain_line(record, "lead>docs")
        == "#7    lead>docs            tool_result       shell_exec → [x]"
    )
    hidden = Record(seq=8, session_id=CHILD, ts=1, event=TextStreamed(text="a"))
    assert plain_line(hidden, "lead>docs") is None
