"""Run workers: the tasks a supervisor's runs execute in, parked between runs.

A run used to get a task of its own, spawned as it started and gone as it ended;
waking a parked task costs less than a spawn and an exit (2 to 4 µs of a memory-log
turn's ~70). So a run goes to a parked worker when there is one, else to a new one; the
run's function (``Supervisor._run_task``, with its ``finally``) is the same either
way. See ``docs/design/actors.md``.

Invariants:
- every worker lives in the supervisor's nursery and runs one run at a time, to its
  end; an exception a run raises ends its worker and reaches the nursery, as a run's
  own task's did;
- at most ``MAX_PARKED`` workers are parked (a worker finding that many exits), and
  a parked one holds no run and no session: it is cancelled with the nursery;
- a run sees the contextvars a task spawned by its caller would: it gets a parked
  worker only if that worker's context equals the caller's, and a worker whose run
  changed its context exits instead of parking (nothing a run sets reaches another);
- a parked worker's ``custom_sleep_data`` is :data:`PARKED` (how a list of the
  nursery's tasks tells it from a run's).
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable

import outcome
import trio

from .session import SessionActor

MAX_PARKED = 4
"""Workers kept parked between runs (one serves a session's turns one after another)."""

PARKED = "halo_actors.runtime.workers: parked between runs"
"""The ``custom_sleep_data`` of a parked worker's task."""

Run = Callable[[SessionActor, bool], Awaitable[None]]
Job = tuple[SessionActor, bool]


class RunWorkers:
    """Runs ``run(actor, compact_first)`` in a worker task of ``nursery``."""

    def __init__(self, nursery: trio.Nursery, run: Run) -> None:
        self._nursery = nursery
        self._run = run
        self._parked: dict[trio.lowlevel.Task, contextvars.Context] = {}
        """Parked workers, most recently parked last, each with its context as it was
        spawned (which it still has: one whose run changed it exits)."""

    def start(self, actor: SessionActor, compact_first: bool) -> None:
        """Start the run now, in the last parked worker if its context is the caller's."""
        if self._parked:
            task, context = self._parked.popitem()
            if context == contextvars.copy_context():
                trio.lowlevel.reschedule(task, outcome.Value((actor, compact_first)))
                return
            self._parked[task] = context  # spawned for a caller with other contextvars
        self._nursery.start_soon(self._work, actor, compact_first)

    async def _work(self, actor: SessionActor, compact_first: bool) -> None:
        spawned = contextvars.copy_context()
        while True:
            await self._run(actor, compact_first)
            if len(self._parked) >= MAX_PARKED or contextvars.copy_context() != spawned:
                return
            actor, compact_first = await self._park(spawned)

    async def _park(self, context: contextvars.Context) -> Job:
        """Until :meth:`start` hands this worker a run (cancelled: with the nursery)."""
        task = trio.lowlevel.current_task()
        self._parked[task] = context

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            del self._parked[task]
            return trio.lowlevel.Abort.SUCCEEDED

        task.custom_sleep_data = PARKED
        job: Job = await trio.lowlevel.wait_task_rescheduled(abort)
        task.custom_sleep_data = None
        return job
