"""Retries of a model call: exponential backoff with full jitter, bounded twice.

A provider makes attempts; an attempt that fails in a way worth repeating raises
:class:`Transient` (429, 529/overloaded, 5xx, a dropped connection, a silent
stream). :func:`with_retries` decides, for every provider alike:

- nothing of the attempt reached the turn yet: wait and try again, up to
  ``attempts`` tries and ``total`` seconds in all; the wait is uniform in
  ``[0, min(max_delay, base_delay · 2^(n-1))]`` (full jitter), or the server's
  ``retry-after`` when it gave one; a wait that would pass the total budget
  ends the call at once with :class:`ModelFailed`;
- the attempt had already streamed to the turn: raise :class:`ModelTimeout`, so
  the turn retries from scratch and never lands the partial text.

Invariants: every wait is bounded by the policy; the last failure's reason is in
the error; nothing here knows a wire format.
"""

from __future__ import annotations

import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field

import trio

from ...core.logger import get_logger
from ..model import ModelEvent, ModelFailed, ModelTimeout

log = get_logger("halo_actors.model")


class Transient(Exception):
    """One attempt failed in a way a later attempt may not (internal to providers)."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    """Tries of one model call in all (the first included)."""
    base_delay: float = 0.5
    max_delay: float = 30.0
    total: float = 120.0
    """Seconds from the first try after which no new try starts."""
    stall: float = 60.0
    """Seconds a response may stay silent (no byte) before the attempt is a timeout."""
    connect: float = 10.0
    """Seconds to open a connection."""
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay(self, failures: int, retry_after: float | None) -> float:
        """The wait after the ``failures``-th failed try (1 for the first)."""
        if retry_after is not None:
            return max(0.0, retry_after)
        ceiling = min(self.max_delay, self.base_delay * 2 ** (failures - 1))
        return self.rng.uniform(0.0, ceiling)


def parse_retry_after(headers: dict[str, str]) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds; an HTTP date is ignored)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if seconds >= 0:
            return seconds
    return None


async def with_retries(
    attempt: Callable[[], AsyncIterator[ModelEvent]], policy: RetryPolicy, what: str
) -> AsyncGenerator[ModelEvent, None]:
    """Stream ``attempt()``'s events, trying again on :class:`Transient` as above."""
    deadline = trio.current_time() + policy.total
    failures = 0
    while True:
        streamed = False
        try:
            async with aclosing(attempt()) as events:  # type: ignore[type-var]
                async for event in events:
                    streamed = True
                    yield event
            return
        except Transient as exc:
            if streamed:
                raise ModelTimeout(f"{what}: {exc}") from None
            failures += 1
            wait = policy.delay(failures, exc.retry_after)
            if failures >= policy.attempts:
                raise ModelFailed(f"{what}: gave up after {failures} attempts: {exc}") from None
            if trio.current_time() + wait > deadline:
                raise ModelFailed(
                    f"{what}: gave up after {failures} attempts ({exc}); the next one would "
                    f"start past the {policy.total:g}s retry budget"
                ) from None
            log.warning("model_retry", model=what, attempt=failures, reason=str(exc), wait=wait)
            await trio.sleep(wait)
