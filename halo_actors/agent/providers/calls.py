"""What both providers share past the wire: a call's arguments parsed, a stream read to
its end.

:func:`read_stream` drives a provider's stream reader over one attempt's SSE events;
a reader raising on a malformed event (a missing field, a wrong type) makes the
attempt fail as :class:`Transient`, never as a crash of the turn.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Protocol

from ..model import ModelEvent, Stop, ToolUse
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
    events: AsyncIterator[SseEvent], reader: Reader, terminal: str
) -> AsyncGenerator[ModelEvent, None]:
    """The model events of one attempt, ending with its ``Stop``."""
    async with aclosing(events):  # type: ignore[type-var]
        async for sse in events:
            try:
                produced = reader.feed(sse)
            except (KeyError, TypeError, AttributeError, IndexError) as exc:
                raise Transient(f"a malformed stream event ({type(exc).__name__}: {exc})") from None
            for event in produced:
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
