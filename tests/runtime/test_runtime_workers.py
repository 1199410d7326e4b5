"""Run workers (``runtime/workers.py``): a parked worker takes the next run, never with
contextvars an earlier run set, at most ``MAX_PARKED`` stay parked, and a shutdown
cancels the parked ones."""

from __future__ import annotations

import contextvars

import trio
import trio.testing

from halo_actors.core.log import MemoryEventLog
from halo_actors.core.state import SessionState
from halo_actors.runtime.session import SessionActor
from halo_actors.runtime.workers import MAX_PARKED, PARKED, RunWorkers

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


def an_actor() -> SessionActor:
    return SessionActor(SessionState("test_1"), MemoryEventLog())


def parked(nursery: trio.Nursery) -> list[trio.lowlevel.Task]:
    return [t for t in nursery.child_tasks if t.custom_sleep_data is PARKED]


async def test_runs_one_after_another_share_one_parked_worker() -> None:
    tasks: list[trio.lowlevel.Task] = []

    async def run(actor: SessionActor, compact_first: bool) -> None:
        tasks.append(trio.lowlevel.current_task())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            workers = RunWorkers(nursery, run)
            for _ in range(3):
                workers.start(an_actor(), False)
                await trio.testing.wait_all_tasks_blocked()
            assert len(set(tasks)) == 1 and len(tasks) == 3
            assert parked(nursery) == tasks[:1]
            nursery.cancel_scope.cancel()  # a shutdown ends the parked worker
    assert not nursery.child_tasks


async def test_a_run_never_sees_the_contextvars_an_earlier_run_set() -> None:
    seen: list[str] = []
    tasks: list[trio.lowlevel.Task] = []

    async def run(actor: SessionActor, compact_first: bool) -> None:
        seen.append(MARK.get())
        tasks.append(trio.lowlevel.current_task())
        MARK.set("set by a run")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            workers = RunWorkers(nursery, run)
            for _ in range(2):
                workers.start(an_actor(), False)
                await trio.testing.wait_all_tasks_blocked()
            assert not parked(nursery)  # its context changed: the worker exited
    assert seen == ["unset", "unset"]
    assert tasks[0] is not tasks[1]


async def test_a_caller_with_other_contextvars_gets_a_worker_with_its_own() -> None:
    seen: list[str] = []

    async def run(actor: SessionActor, compact_first: bool) -> None:
        seen.append(MARK.get())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            workers = RunWorkers(nursery, run)
            workers.start(an_actor(), False)
            await trio.testing.wait_all_tasks_blocked()
            token = MARK.set("the caller's")
            workers.start(an_actor(), False)
            MARK.reset(token)
            await trio.testing.wait_all_tasks_blocked()
            assert len(parked(nursery)) == 2
            nursery.cancel_scope.cancel()
    assert seen == ["unset", "the caller's"]


async def test_at_most_max_parked_workers_stay_parked() -> None:
    release = trio.Event()

    async def run(actor: SessionActor, compact_first: bool) -> None:
        await release.wait()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            workers = RunWorkers(nursery, run)
            for _ in range(MAX_PARKED + 3):
                workers.start(an_actor(), False)
            await trio.testing.wait_all_tasks_blocked()
            release.set()
            await trio.testing.wait_all_tasks_blocked()
            assert len(nursery.child_tasks) == len(parked(nursery)) == MAX_PARKED
            nursery.cancel_scope.cancel()


async def test_an_exception_a_run_raises_reaches_the_nursery() -> None:
    async def run(actor: SessionActor, compact_first: bool) -> None:
        raise RuntimeError("a bug in a run")

    with trio.fail_after(5):
        try:
            async with trio.open_nursery() as nursery:
                RunWorkers(nursery, run).start(an_actor(), False)
        except* RuntimeError as group:
            assert str(group.exceptions[0]) == "a bug in a run"
        else:
            raise AssertionError("the run's exception was swallowed")
