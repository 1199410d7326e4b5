"""ScriptedModel: a deterministic model for demos, tests and chaos runs (no network).

A :class:`Script` is a list of :class:`Rule` s; the first rule matching the
turn's input round (regex on its text, round kind, resumed-after-interrupt)
decides the whole turn: one :class:`Step` per model call. A step streams
thinking and text in chunks with delays, asks for a parallel batch of tool
calls, and stops with a reason; it can also fail, or time out a number of
times before succeeding. A rule may build its steps from the regex match (the
built-in demo agent counts, runs commands and spawns children that way).

Invariants: the same request stream gives the same responses; a step past the
end of a rule's steps ends the turn with no text.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field

import msgspec
import trio

from ..core.events import RoundKind
from .model import (
    ModelEvent,
    ModelFailed,
    ModelRequest,
    ModelTimeout,
    RoundInfo,
    Stop,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolUse,
)


class ScriptedCall(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    input: dict[str, object] = msgspec.field(default_factory=dict)
    id: str | None = None


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One model response."""

    text: str = ""
    chunk: int = 0
    """Characters per streamed delta; 0 streams the text as one delta."""
    delay: float = 0.0
    """Seconds to wait before each delta (and before the tool calls)."""
    thinking: str = ""
    calls: tuple[ScriptedCall, ...] = ()
    stop: StopReason | None = None
    """Default: ``tool_use`` when there are calls, else ``end_turn``."""
    fail: str | None = None
    """Raise ``ModelFailed`` with this message after streaming the text."""
    timeouts: int = 0
    """The first N attempts of this step stream their text, then time out."""


@dataclass(frozen=True)
class Rule:
    steps: tuple[Step, ...] = ()
    match: str | None = None
    kind: RoundKind | None = None
    resumed: bool | None = None
    build: Callable[[re.Match[str]], tuple[Step, ...]] | None = field(default=None, compare=False)
    """Builds the steps from the match (takes precedence over ``steps``)."""

    def matches(self, round: RoundInfo) -> re.Match[str] | None:
        if self.kind is not None and round.kind != self.kind:
            return None
        if self.resumed is not None and round.resumed_after_interrupt != self.resumed:
            return None
        return self._pattern.search(round.text)

    @functools.cached_property
    def _pattern(self) -> re.Pattern[str]:
        """``match`` compiled once (a rule is asked every turn; ``re``'s own cache is a
        lookup keyed by pattern and flags, about as costly as the search itself)."""
        return re.compile(self.match or "", re.DOTALL)


@dataclass(frozen=True)
class Script:
    rules: tuple[Rule, ...] = ()
    summary: str = "The conversation so far, in short: {count} earlier messages."
    """Answer to a compaction request; ``{count}`` is the number of messages summarised."""

    def steps_for(self, round: RoundInfo) -> tuple[Step, ...]:
        for rule in self.rules:
            found = rule.matches(round)
            if found is not None:
                return rule.build(found) if rule.build is not None else rule.steps
        return ()


class ScriptedModel:
    """Implements the ``Model`` protocol from per-agent scripts."""

    def __init__(self, scripts: Mapping[str, Script], *, fallback: Script | None = None) -> None:
        self._scripts = dict(scripts)
        self._fallback = fallback or Script()
        self._attempts: dict[tuple[str, int, str], int] = {}
        self._turn_steps: dict[str, tuple[Step, ...]] = {}
        self._call_ids = itertools.count(1)

    def script_for(self, agent_id: str) -> Script:
        return self._scripts.get(agent_id, self._fallback)

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """The step's events. An instant step (no delay, timeout or failure) is a plain
        async iterator with nothing to release, so closing it costs nothing; the others
        are one async generator each."""
        script = self.script_for(request.agent_id)
        if request.purpose == "compact":
            summary = script.summary.format(count=len(request.messages))
            return _Instant(iter((TextDelta(summary), Stop("end_turn"))))
        if request.step == 0 or request.session_id not in self._turn_steps:
            self._turn_steps[request.session_id] = script.steps_for(request.round)
        steps = self._turn_steps[request.session_id]
        if request.step >= len(steps):
            return _Instant(iter((Stop("end_turn"),)))
        step = steps[request.step]
        if not step.delay and not step.timeouts and step.fail is None:
            return _Instant(self._instant(step))
        return self._play(request, step)

    def _instant(self, step: Step) -> Iterator[ModelEvent]:
        """What :meth:`_play` yields for a step with no delay, timeout or failure."""
        if step.thinking:
            yield ThinkingDelta(step.thinking)
        for piece in _chunks(step.text, step.chunk):
            yield TextDelta(piece)
        for call in step.calls:
            yield ToolUse(
                call.id or f"toolu_{next(self._call_ids):06d}", call.name, dict(call.input)
            )
        yield Stop(step.stop or ("tool_use" if step.calls else "end_turn"))

    async def _play(self, request: ModelRequest, step: Step) -> AsyncGenerator[ModelEvent, None]:
        if step.thinking:
            yield ThinkingDelta(step.thinking)
        for piece in _chunks(step.text, step.chunk):
            if step.delay:
                await trio.sleep(step.delay)
            yield TextDelta(piece)
        key = (request.session_id, request.step, request.round.text)
        attempt = self._attempts.get(key, 0)
        if attempt < step.timeouts:
            self._attempts[key] = attempt + 1
            raise ModelTimeout(f"scripted timeout {attempt + 1} of {step.timeouts}")
        if step.fail is not None:
            raise ModelFailed(step.fail)
        if step.calls and step.delay:
            await trio.sleep(step.delay)
        for call in step.calls:
            yield ToolUse(
                call.id or f"toolu_{next(self._call_ids):06d}", call.name, dict(call.input)
            )
        yield Stop(step.stop or ("tool_use" if step.calls else "end_turn"))


class _Instant:
    """An async iterator over events made as they are read, with no ``aclose``: nothing
    to release (``open_stream`` closes an async generator under a shielded scope)."""

    __slots__ = ("_events",)

    def __init__(self, events: Iterator[ModelEvent]) -> None:
        self._events = events

    def __aiter__(self) -> _Instant:
        return self

    async def __anext__(self) -> ModelEvent:
        for event in self._events:
            return event
        raise StopAsyncIteration


def _chunks(text: str, size: int) -> list[str]:
    if not text:
        return []
    if size <= 0:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]
