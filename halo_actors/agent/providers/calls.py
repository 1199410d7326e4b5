"""What both providers share past the wire: a call's arguments parsed, a stream read to
its end.

:func:`read_stream` drives a provider's stream reader over one attempt's SSE events;
a reader raising on a malformed event (a missing field, a wrong type) makes the
attempt fail as :class:`Transient`, never as a crash of the turn.

Deltas that arrived in one network read are joined into one ``TextDelta`` (or one
``ThinkingDelta``) before they go to the turn: they reached us at the same instant, so
nothing is delayed, and the log stores one ``stream`` event per read instead of one per
token when a fast server sends many at once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Protocol

from ..model import ModelEvent, Stop, TextDelta, ThinkingDelta, ToolUse
from .retry import Transient
from .sse import SseEvent

Json = dict[str, object]


class Reader(Protocol):
    stop: Stop | None
    """Set when the response is complete."""

    def feed(self, sse: SseEvent) -> list[ModelEvent]: ...

    def at_eof(self) -> list[ModelEvent]:
        """The body ended: the last events, setting ``stop`` if the response was whole."""
        ...


async def read_stream(
    reads: AsyncIterator[list[SseEvent]], reader: Reader, terminal: str
) -> AsyncGenerator[ModelEvent, None]:
    """The model events of one attempt, ending with its ``Stop``."""
    async with aclosing(reads):  # type: ignore[type-var]
        async for batch in reads:
            produced: list[ModelEvent] = []
            for sse in batch:
                try:
                    produced += reader.feed(sse)
                except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
                    reason = f"a malformed stream event ({type(exc).__name__}: {exc})"
                    raise Transient(reason) from None
                if reader.stop is not None:
                    break
            for event in joined(produced):
                yield event
            if reader.stop is not None:
                yield reader.stop
                return
    for event in reader.at_eof():
        yield event
    if reader.stop is not None:
        yield reader.stop
        return
    raise Transient(f"the stream ended before {terminal}")


def joined(events: list[ModelEvent]) -> list[ModelEvent]:
    """Adjacent text deltas as one, adjacent plain thinking deltas as one."""
    out: list[ModelEvent] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, TextDelta) and isinstance(last, TextDelta):
            out[-1] = TextDelta(last.text + event.text)
        elif _plain(event) and _plain(last):
            out[-1] = ThinkingDelta(last.text + event.text)  # type: ignore[union-attr]
        else:
            out.append(event)
    return out


def _plain(event: ModelEvent | None) -> bool:
    return isinstance(event, ThinkingDelta) and not (event.signature or event.redacted)


def tool_use(id: str, name: str, arguments: str) -> ToolUse:
    """A call from its streamed arguments; arguments that are not a JSON object make a
    call the turn answers with ``input_error`` instead of running it."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        return ToolUse(id, name, {}, input_error=f"the arguments were not valid JSON ({exc})")
    if not isinstance(value, dict):
        return ToolUse(id, name, {}, input_error="the arguments were not a JSON object")
    return ToolUse(id, name, value)
