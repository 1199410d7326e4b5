"""Starting a sub-session (``start_child``, the ``start_session`` tool): the child comes
into the log with its task, or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from runtime_harness import ANSWER_ANYTHING, BUDGET, running

from halo_actors.core.errors import EventTooLarge
from halo_actors.core.events import Event, Record, kind_of
from halo_actors.core.log import MemoryEventLog


class AppendCountingLog(MemoryEventLog):
    """The in-memory log, remembering each append's session and event kinds."""

    def __init__(self, *, max_event_bytes: int = 64 * 1024) -> None:
        super().__init__(max_event_bytes=max_event_bytes)
        self.appends: list[tuple[str, list[str]]] = []

    def append_nowait(self, session_id: str, *events: Event) -> list[Record]:
        self.appends.append((session_id, [kind_of(e) for e in events]))
        return super().append_nowait(session_id, *events)


async def test_a_child_is_created_with_its_task_in_one_append(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: no reader ever sees a sub-session without the task it was started for."""
    log = AppendCountingLog()
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "child task")
            await rt.sup.wait_idle(parent)

            first = next(kinds for sid, kinds in log.appends if sid == child)
            assert first == ["session_created", "message_queued"]
            queued = (await rt.records(child))[1].event
            assert getattr(queued, "text", None) == "child task"
            assert getattr(queued, "source_session_id", None) == parent
            assert rt.sup.output(child) == "ok"


async def test_a_task_too_large_for_a_round_creates_no_child(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: bad input gets a clear error and changes nothing (no child without its task)."""
    log = AppendCountingLog(max_event_bytes=4096)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            before = len(await rt.records())
            with pytest.raises(EventTooLarge, match="cannot open a round"):
                await rt.sup.start_child(parent, "default", "x" * 5000)

            assert rt.sup.children(parent) == []
            assert len(await rt.records()) == before
