"""Following a remote tree: the server's ``/api/web/tree`` WebSocket, reconnecting on drops.

:func:`follow` connects, reads the opening object and then one record per message,
and hands each record to its view exactly once, in seq order. When the connection
drops (the server restarts, the network blips, the server closes a slow client with
1013) it waits (0.5 s, doubling up to 5 s, reset by every good connection) and
reconnects with ``lastEventId`` = the last seq it saw, so nothing is missed and
nothing repeats. A refusal (401, 403, 404, 400) is final: it raises
:class:`WatchRefused` with the server's message.

The token travels in the ``x-token`` header, never in the URL. Without a session id,
:func:`newest_session` asks ``GET /api/web/sessions`` (stdlib HTTP, in a thread) for
the account's most recently updated root.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Protocol

import trio
import trio_websocket

from ..core.events import Record, decode_record

RETRY_FIRST = 0.5
RETRY_MOST = 5.0
MAX_MESSAGE = 8 << 20
"""Bytes one WebSocket message may have (a record is at most the log's 1 MiB cap)."""
CONNECT_TIMEOUT = 10.0


class WatchRefused(Exception):
    """The server refused the watch (bad token, foreign or unknown session): final."""


class WatchView(Protocol):
    def status(self, state: str, detail: str) -> None:
        """``connecting``, ``live`` (detail: the tree's root) or ``reconnecting`` (why)."""
        ...

    def record(self, record: Record) -> None: ...


def http_base(url: str) -> str:
    """``http(s)://host:port`` of the server, from whatever the user typed."""
    parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parsed.scheme not in ("http", "https", "ws", "wss") or not parsed.netloc:
        raise WatchRefused(f"not a server URL: {url!r}")
    scheme = {"ws": "http", "wss": "https"}.get(parsed.scheme, parsed.scheme)
    return f"{scheme}://{parsed.netloc}"


def tree_url(base: str, session_id: str, after: int) -> str:
    query = {"sessionId": session_id, **({"lastEventId": str(after)} if after else {})}
    ws = base.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    return f"{ws}/api/web/tree?{urllib.parse.urlencode(query)}"


def _refusal(status: int, body: bytes | None) -> WatchRefused:
    try:
        message = json.loads(body or b"{}").get("error") or ""
    except (ValueError, AttributeError):
        message = ""
    return WatchRefused(f"the server refused ({status}): {message or 'no reason given'}")


async def newest_session(base: str, token: str) -> str:
    """The account's most recently updated live root session on that server."""

    def get() -> bytes:
        request = urllib.request.Request(f"{base}/api/web/sessions", headers={"x-token": token})
        try:
            with urllib.request.urlopen(request, timeout=CONNECT_TIMEOUT) as answer:
                body: bytes = answer.read()
                return body
        except urllib.error.HTTPError as exc:
            raise _refusal(exc.code, exc.read()) from None
        except (urllib.error.URLError, OSError) as exc:
            raise WatchRefused(f"cannot reach {base}: {exc}") from None

    rows = json.loads(await trio.to_thread.run_sync(get)).get("sessions") or []
    if not rows:
        raise WatchRefused("this token has no sessions yet: start one, then watch it")
    newest: str = rows[0]["sessionId"]
    return newest


async def follow(base: str, token: str, session_id: str, view: WatchView) -> None:
    """Show the tree's records until cancelled; reconnects after every drop."""
    cursor = _Cursor(view)
    delay = RETRY_FIRST
    view.status("connecting", base)
    while True:
        try:
            await _one_connection(base, token, session_id, cursor)
            why = "the server closed the stream"
        except trio_websocket.ConnectionRejected as exc:
            if exc.status_code < 500:
                raise _refusal(exc.status_code, exc.body) from None
            why = f"the server answered {exc.status_code}"
        except _DROPS as exc:
            why = _why(exc)
        if cursor.connected:
            delay, cursor.connected = RETRY_FIRST, False
        view.status("reconnecting", why)
        await trio.sleep(delay)
        delay = min(delay * 2, RETRY_MOST)


class _Cursor:
    """The last seq shown: each record reaches the view once, in order, across connections."""

    def __init__(self, view: WatchView) -> None:
        self.view = view
        self.after = 0
        self.connected = False

    def show(self, record: Record) -> None:
        if record.seq > self.after:  # the server resumes exactly; this only guards
            self.after = record.seq
            self.view.record(record)


async def _one_connection(base: str, token: str, session_id: str, cursor: _Cursor) -> None:
    """One connection's records, until it closes."""
    async with trio_websocket.open_websocket_url(
        tree_url(base, session_id, cursor.after),
        extra_headers=[(b"x-token", token.encode())],
        max_message_size=MAX_MESSAGE,
        connect_timeout=CONNECT_TIMEOUT,
    ) as ws:
        opening = json.loads(await ws.get_message())
        cursor.connected = True
        cursor.view.status("live", str(opening.get("sessionId", session_id)))
        while True:
            cursor.show(decode_record(await ws.get_message()))


_DROPS = (
    OSError,
    trio.BrokenResourceError,
    trio_websocket.HandshakeError,
    trio_websocket.ConnectionClosed,
)


def _why(exc: BaseException) -> str:
    if isinstance(exc, trio_websocket.ConnectionClosed) and exc.reason is not None:
        return f"connection closed ({exc.reason.code})"
    return f"connection lost ({type(exc).__name__})"
