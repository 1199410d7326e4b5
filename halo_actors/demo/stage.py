"""The stage one scenario plays on: its own workspace and runtime, a view, and checks.

A scenario gets a :class:`Stage` and uses it to open the embedded runtime on its
workspace (``open_runtime``: SQLite under ``<workspace>/.halo/``), to wait for
logged facts, to narrate and to record checks. Every record of the scenario's
log reaches the view through one catch-up subscription (the *feed*), in seq
order, including what a shutdown appends.

Invariants:
- every wait is bounded: a fact that does not come within ``WAIT_SECONDS`` raises
  :class:`DemoStuck` naming it, which fails the scenario (a runtime bug to
  report, never something to paper over);
- ``seconds(t)`` is the only way a scenario turns a pacing into real time, so one
  ``speed`` factor scales a whole run (tests play faster than the tour).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import trio

from ..agent.model import Model
from ..core.errors import SubscriptionClosed
from ..core.events import Event, Record
from ..core.log import EventFilter, EventLog
from ..core.state import SessionState
from ..runtime.embed import open_runtime
from ..runtime.profiles import Profiles
from ..runtime.supervisor import Supervisor
from .board import Board, rows_of
from .scenario import Check, Scenario
from .view import View

E = TypeVar("E", bound=Event)

WAIT_SECONDS = 20.0
"""Longest any single wait for a logged fact may take (real seconds, not scaled)."""

SEED_FILES = {
    "src/app.py": "def main() -> None:\n    print('hello')\n\n\ndef add(a, b):\n    return a + b\n",
    "src/util.py": "def slug(text):\n    return text.lower().replace(' ', '-')\n",
    "tests/test_app.py": "def test_add():\n    assert 1 + 1 == 2\n\n\ndef test_slug():\n    pass\n",
    "docs/guide.md": "# Guide\n\nRun the app, read the logs, fix what breaks.\n",
    "README.md": "# sample project\n\nA tiny project the demo agents work on.\n",
}
"""A tiny project each scenario's workspace starts with, for the shell commands to look at."""


class DemoStuck(Exception):
    """A scenario waited too long for something the runtime should have done."""


def seed_workspace(workspace: Path) -> None:
    for relative, text in SEED_FILES.items():
        path = workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


class Stage:
    def __init__(self, scenario: Scenario, workspace: Path, view: View, speed: float) -> None:
        self.scenario = scenario
        self.workspace = workspace
        self.view = view
        self.speed = speed
        self.checks: list[Check] = []
        self.seen = 0
        """The seq of the last record shown (the feed's cursor)."""
        self._shown = trio.Event()
        """Set (and replaced) whenever a record is shown; :meth:`wait_caught_up` waits on it."""
        self._log: EventLog | None = None

    # --- narration --------------------------------------------------------------

    def seconds(self, paced: float) -> float:
        """Real seconds for a pacing written for speed 1."""
        return paced * self.speed

    async def wait_caught_up(self) -> None:
        """Until the feed has shown every record logged so far (narration lands in order)."""
        with trio.move_on_after(WAIT_SECONDS):
            while self._log is not None and self.seen < self._log.last_seq:
                await self._shown.wait()

    async def note(self, text: str) -> None:
        await self.wait_caught_up()
        self.view.note(text)

    async def check(self, label: str, ok: bool) -> bool:
        await self.wait_caught_up()
        return self.record_check(label, ok)

    def record_check(self, label: str, ok: bool) -> bool:
        check = Check(label, bool(ok))
        self.checks.append(check)
        self.view.check(check)
        return check.ok

    async def snapshot(self, label: str, states: Iterable[SessionState] | Board) -> None:
        """Show the tree as it is now: a supervisor's states, or a board's (with streams)."""
        await self.wait_caught_up()
        rows = states.rows() if isinstance(states, Board) else rows_of(states)
        self.view.snapshot(label, rows)

    def show(self, record: Record) -> None:
        """Hand one record to the view (the feed does this; so does a subprocess reader)."""
        self.seen = max(self.seen, record.seq)
        self.view.record(record)
        self._shown.set()
        self._shown = trio.Event()

    # --- the runtime ------------------------------------------------------------

    @asynccontextmanager
    async def runtime(
        self, model: Model, profiles: Profiles, *, after_seq: int = 0
    ) -> AsyncIterator[Supervisor]:
        """The embedded runtime on this stage's workspace, its log followed by the view."""
        async with trio.open_nursery() as nursery:
            try:
                async with open_runtime(self.workspace, model=model, profiles=profiles) as sup:
                    self._log = sup.log
                    await nursery.start(self._follow, sup.log, after_seq)
                    yield sup
            finally:
                self._log = None  # closed: the feed shows what is left in its buffer and ends

    async def _follow(
        self, log: EventLog, after_seq: int, *, task_status: trio.TaskStatus[None]
    ) -> None:
        try:
            async with log.subscribe(after_seq=after_seq) as records:
                task_status.started()
                async for record in records:
                    self.show(record)
        except SubscriptionClosed:
            return

    # --- waits ------------------------------------------------------------------

    async def wait_record(
        self, what: str, match: Callable[[Record], bool], *, session_id: str | None = None
    ) -> Record:
        """The first record (from the start of the log) that ``match`` accepts."""
        if self._log is None:
            raise RuntimeError("wait_record needs an open runtime")
        flt = EventFilter(session_id=session_id)
        with trio.move_on_after(WAIT_SECONDS):
            async with self._log.subscribe(flt) as records:
                async for record in records:
                    if match(record):
                        return record
        raise DemoStuck(f"waited {WAIT_SECONDS:g} s for {what}")

    async def wait_event(
        self,
        session_id: str,
        kind: type[E],
        where: Callable[[E], bool] = lambda _: True,
        *,
        what: str = "",
    ) -> E:
        """The first event of ``kind`` in ``session_id``'s log that ``where`` accepts."""
        record = await self.wait_record(
            what or f"a {kind.__name__} event",
            lambda r: isinstance(r.event, kind) and where(r.event),
            session_id=session_id,
        )
        assert isinstance(record.event, kind)
        return record.event

    async def wait_idle(self, sup: Supervisor, session_id: str) -> None:
        """Until no run is active in ``session_id``'s subtree."""
        with trio.move_on_after(WAIT_SECONDS):
            await sup.wait_idle(session_id)
            return
        raise DemoStuck(f"waited {WAIT_SECONDS:g} s for the tree under {session_id} to go quiet")

    async def records(self, session_id: str | None = None) -> list[Record]:
        if self._log is None:
            raise RuntimeError("records needs an open runtime")
        return await self._log.read(EventFilter(session_id=session_id))
