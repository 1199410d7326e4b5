"""Helpers for driving a real supervisor over a real event log with the ScriptedModel.

(A plain module, imported as ``from runtime_harness import …``: ``tests/runtime`` is on
``sys.path`` under pytest's default import mode; importing from ``conftest`` would
depend on which of the suite's several conftest modules was loaded last.)

``running(tmp_path, *rules)`` opens a supervisor whose ``default`` agent plays the
given rules; the :class:`Runtime` it yields reads the log back (``records``,
``events``), waits for a logged fact without sleeping (``wait_for``, a catch-up
subscription on the log), and checks that replaying a session's records gives
its live state (``assert_replay_matches``).

Clocks: tests with no subprocess use ``autojump_clock`` (a ``Step(delay=…)`` then
costs nothing and pins an interleaving); tests that run shell commands use the
real clock and keep their commands short.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import trio
from proc_table import live_group_members, processes_in

from halo_actors.agent.model import ModelEvent, ModelRequest, estimate_tokens
from halo_actors.agent.scripted import Rule, Script, ScriptedCall, ScriptedModel, Step
from halo_actors.core.conversation import Message, ToolResultBlock
from halo_actors.core.events import Event, Record, RoundStarted, ToolReturned, TurnCompleted
from halo_actors.core.log import EventFilter, EventLog, MemoryEventLog
from halo_actors.core.state import replay
from halo_actors.runtime.profiles import AgentProfile, Limits, Profiles
from halo_actors.runtime.supervisor import Supervisor, open_supervisor
from halo_actors.tools.files import Workspace

BUDGET = 10.0
"""Seconds (virtual under autojump) any runtime test may take before it is failed."""

SHELL_BUDGET = 15.0
"""Seconds (real) for tests that run shell commands."""

E = TypeVar("E", bound=Event)

ANSWER_ANYTHING = Rule(steps=(Step(text="ok"),))
"""A catch-all rule: one short answer (put it last)."""


def call(name: str, **inputs: object) -> ScriptedCall:
    return ScriptedCall(name=name, input=dict(inputs))


def shell(command: str) -> ScriptedCall:
    return call("shell_exec", command=command)


def profiles_with(**limits: object) -> Profiles:
    """The ``default`` profile with some of its limits changed."""
    return Profiles({"default": AgentProfile(name="default", limits=Limits(**limits))})  # type: ignore[arg-type]


class SlowCompactionModel(ScriptedModel):
    """The ScriptedModel, except that a compaction request takes ``seconds`` to answer
    (the scripted summary is instant, which leaves no window to act during one)."""

    def __init__(self, script: Script, seconds: float) -> None:
        super().__init__({"default": script})
        self.seconds = seconds

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        if request.purpose == "compact":
            await trio.sleep(self.seconds)
        async for item in super().stream(request):
            yield item


@dataclass
class Runtime:
    sup: Supervisor
    log: EventLog
    model: ScriptedModel

    async def records(self, session_id: str | None = None) -> list[Record]:
        flt = EventFilter(session_id=session_id) if session_id else EventFilter()
        return await self.log.read(flt)

    async def events(self, session_id: str, kind: type[E]) -> list[E]:
        return [r.event for r in await self.records(session_id) if isinstance(r.event, kind)]

    async def rounds(self, session_id: str) -> list[RoundStarted]:
        return await self.events(session_id, RoundStarted)

    async def completes(self, session_id: str) -> list[TurnCompleted]:
        return await self.events(session_id, TurnCompleted)

    async def results(self, session_id: str) -> list[ToolReturned]:
        return await self.events(session_id, ToolReturned)

    async def wait_for(
        self,
        session_id: str,
        kind: type[E],
        where: Callable[[E], bool] = lambda _: True,
        *,
        count: int = 1,
    ) -> E:
        """Until ``count`` records of ``kind`` matching ``where`` are in the log; the last one."""
        seen = 0
        async with self.log.subscribe(EventFilter(session_id=session_id)) as records:
            async for record in records:
                if isinstance(record.event, kind) and where(record.event):
                    seen += 1
                    if seen == count:
                        return record.event
        raise AssertionError("the subscription ended")  # pragma: no cover

    async def assert_replay_matches(self, session_id: str) -> None:
        live = self.sup.state(session_id)
        assert replay(session_id, await self.records(session_id)) == live
        assert live.estimated_tokens == estimate_tokens(live.messages)  # kept up to date


@asynccontextmanager
async def running(
    tmp_path: Path,
    *rules: Rule,
    profiles: Profiles | None = None,
    log: EventLog | None = None,
    model: ScriptedModel | None = None,
) -> AsyncIterator[Runtime]:
    """A supervisor whose ``default`` agent plays ``rules`` (first match wins)."""
    event_log = log if log is not None else MemoryEventLog()
    scripted = model or ScriptedModel({"default": Script(rules=rules)})
    async with open_supervisor(
        event_log, scripted, workspace=Workspace(tmp_path), profiles=profiles
    ) as sup:
        yield Runtime(sup, event_log, scripted)


def result_ids(messages: Sequence[Message]) -> list[str]:
    return [b.tool_use_id for m in messages for b in m.content if isinstance(b, ToolResultBlock)]


def assert_every_tool_use_answered_once(messages: Sequence[Message]) -> None:
    answered = result_ids(messages)
    for index, message in enumerate(messages):
        for use in message.tool_uses():
            assert answered.count(use.id) == 1, f"{use.id} has {answered.count(use.id)} results"
            following = messages[index + 1]
            assert use.id in result_ids([following]), f"{use.id} is not answered right after"


async def poll_until(condition: Callable[[], bool], interval: float = 0.01) -> None:
    """Poll what signals nothing: files a shell command writes, the process table, and
    (in real-clock tests only) a stop being under way."""
    while not condition():  # noqa: ASYNC110 - there is no event to wait on
        await trio.sleep(interval)


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text else None


__all__ = [
    "ANSWER_ANYTHING",
    "BUDGET",
    "SHELL_BUDGET",
    "Rule",
    "Runtime",
    "Script",
    "ScriptedCall",
    "SlowCompactionModel",
    "Step",
    "assert_every_tool_use_answered_once",
    "call",
    "live_group_members",
    "poll_until",
    "processes_in",
    "profiles_with",
    "read_pid",
    "result_ids",
    "running",
    "shell",
]
