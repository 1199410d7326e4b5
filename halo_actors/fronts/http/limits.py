"""Per-token limits and the end of a revoked token's open streams (``docs/http.md``).

Each token (keyed by its hash) may have at most :attr:`TokenLimits.max_streams` SSE
streams and WebSockets open at once, and may mint at most ``mints_per_minute``
sessions and send at most ``chats_per_minute`` chats in any 60 s. Past a limit the
request is answered ``429 {"error": ...}`` with ``Retry-After`` (seconds) and
changes nothing. Rates are sliding windows of timestamps, so no burst at a minute's
edge doubles them.

Revocation: :meth:`Quotas.revoke` is called with the keys of tokens that vanished
from (or changed in) the token file; the open streams of those tokens hold a
:class:`StreamTicket` whose ``revoked`` event is then set, and end (SSE: the body
ends; WebSocket: close 1008).

Invariants:
- a ticket is released exactly once (releasing again is a no-op), and the count
  of a token with no open stream is dropped, so memory follows open streams and
  the tokens that used the server in the last minute;
- a refused request takes nothing: no stream slot, no rate slot.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import trio

from .errors import ApiError

WINDOW = 60.0
"""Seconds of the rate windows."""
Kind = Literal["chat", "mint"]


@dataclass(frozen=True)
class TokenLimits:
    """What one token may do; :class:`FrontSettings` carries them (``limits=``)."""

    max_streams: int = 32
    """SSE streams (chat, subscribe) and WebSockets one token may have open at once."""
    mints_per_minute: int = 60
    """``POST /api/web/sessions`` per token in any 60 s."""
    chats_per_minute: int = 120
    """``POST /api/web/chat`` (slash commands included) per token in any 60 s."""
    history_limit: int = 200
    """Rows a ``history`` page holds when the request names no ``limit``."""
    history_max_limit: int = 1000
    """The largest ``limit`` a ``history`` request may ask for (more → 400)."""
    history_max_bytes: int = 4 << 20
    """Encoded bytes a ``history`` page stops at (at least one row is always sent)."""


UNLIMITED_RATES = 1 << 40


def load_test_limits(streams: int = 100_000) -> TokenLimits:
    """Limits for load runs and benchmarks, where one token plays many clients."""
    return TokenLimits(
        max_streams=streams, mints_per_minute=UNLIMITED_RATES, chats_per_minute=UNLIMITED_RATES
    )


@dataclass(eq=False)
class StreamTicket:
    """One open stream's slot; ``revoked`` is set when its token is revoked."""

    release: Callable[[], None]
    revoked: trio.Event


@dataclass
class _Token:
    streams: int = 0
    revoked: trio.Event = field(default_factory=trio.Event)
    calls: dict[Kind, deque[float]] = field(default_factory=dict)


class Quotas:
    """The limits of every token one server has seen, and their open streams."""

    def __init__(self, limits: TokenLimits, clock: Callable[[], float] = trio.current_time) -> None:
        self.limits = limits
        self._clock = clock
        self._tokens: dict[str, _Token] = {}
        self.open_total = 0
        """Streams open now, of every token (revoked ones included until they close)."""

    def open_stream(self, key: str) -> StreamTicket:
        """A slot for one more stream of token ``key``, or 429."""
        token = self._tokens.setdefault(key, _Token())
        cap = self.limits.max_streams
        if token.streams >= cap:
            raise ApiError(
                429,
                f"too many open streams for this token (at most {cap}); close one first",
                headers={"retry-after": "1"},
            )
        token.streams += 1
        self.open_total += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                token.streams -= 1
                self.open_total -= 1
                self._forget_if_idle(key, token)

        return StreamTicket(release, token.revoked)

    def charge(self, key: str, kind: Kind) -> None:
        """Count one ``kind`` call of token ``key``, or refuse it with 429."""
        cap = self.limits.chats_per_minute if kind == "chat" else self.limits.mints_per_minute
        token = self._tokens.setdefault(key, _Token())
        calls = token.calls.setdefault(kind, deque())
        now = self._clock()
        while calls and calls[0] <= now - WINDOW:
            calls.popleft()
        if len(calls) >= cap:
            wait = max(1, math.ceil(calls[0] + WINDOW - now))
            what = "chats" if kind == "chat" else "session mints"
            raise ApiError(
                429,
                f"too many {what} for this token (at most {cap} per minute); retry in {wait} s",
                headers={"retry-after": str(wait)},
            )
        calls.append(now)

    def revoke(self, keys: Iterable[str]) -> None:
        """End the open streams of these tokens (they were revoked or changed)."""
        for key in keys:
            token = self._tokens.pop(key, None)
            if token is not None:
                token.revoked.set()

    def open_streams(self, key: str) -> int:
        token = self._tokens.get(key)
        return token.streams if token is not None else 0

    def _forget_if_idle(self, key: str, token: _Token) -> None:
        now = self._clock()
        recent = any(c and c[-1] > now - WINDOW for c in token.calls.values())
        if token.streams == 0 and not recent and self._tokens.get(key) is token:
            del self._tokens[key]
