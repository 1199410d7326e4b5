"""HTTP/1.1 only: hypercorn's trio worker, with a connection protocol that never speaks HTTP/2.

Why (``docs/design/http-transport.md``): the slow-reader defence is per connection
(``TCP_USER_TIMEOUT`` drops a connection whose sent data stays unacknowledged). Over
HTTP/2 a client holds streams open with a zero flow-control window while it keeps
acknowledging TCP data, so no socket write ever stalls and the defence never fires.
Serving HTTP/1.1 only keeps one request per connection at a time, where it works.

Rules of :class:`Http1Protocol` (hypercorn's h11 protocol, changed in three places):

- a prior-knowledge preface (``PRI * HTTP/2.0``) is answered ``505`` and the
  connection closes; nothing reaches the app;
- an ``Upgrade: h2c`` header is ignored: the request is answered in HTTP/1.1 (a
  server may ignore an upgrade, RFC 9110 §7.8);
- every error hypercorn answers by itself (400 for a malformed request, 431 for a
  request line or headers over ``h11_max_incomplete_size``, 400 for a bad WebSocket
  handshake, 500 for an app that ended without answering) carries a JSON body
  ``{"error": "..."}`` like every answer of the app;
- a request whose ``x-token`` header was cut by a bare newline (``TOKEN=$(cmd)`` that
  printed two lines, sent as ``-H "x-token: $TOKEN"``) is malformed HTTP, refused by
  the parser before any app sees it: it is answered ``401`` with the app's
  malformed-token message instead of a bare ``400``, so the client learns what to fix.

:func:`serve` is hypercorn's ``worker_serve`` for plain TCP listeners (no TLS, no
QUIC, no lifespan: the app has no startup hooks), using that protocol.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Awaitable, Callable
from functools import partial
from http import HTTPStatus
from typing import Final

import h11
import msgspec
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, RawData
from hypercorn.events import Event as HypercornEvent
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.events import Body, Response
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr, wrap_app
from starlette.types import ASGIApp

from .errors import MALFORMED_TOKEN

MESSAGES: Final = {
    400: "malformed HTTP request",
    431: "request line or headers too large",
    505: "only HTTP/1.1 is served",
}
_EMPTY_ERROR_HEADERS: Final = {(b"content-length", b"0"), (b"connection", b"close")}
"""What hypercorn's own error answers carry (and nothing else): no body."""


def error_json(status: int) -> bytes:
    message = MESSAGES.get(status) or HTTPStatus(status).phrase.lower()
    return msgspec.json.encode({"error": message})


def _json_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]


_HEADER_LINE: Final = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:")
HEAD_LIMIT: Final = 65536
"""Bytes of a request head kept to look for a split ``x-token`` header."""


def token_header_split(head: bytes) -> bool:
    """The ``x-token`` header of this request head ends in a bare newline followed by a
    line that is no header: a token value that held a newline."""
    lines = head.split(b"\n")
    for line, after in itertools.pairwise(lines):
        if line.lower().startswith(b"x-token:") and not line.endswith(b"\r"):
            rest = after.rstrip(b"\r")
            return bool(rest) and _HEADER_LINE.match(rest) is None
    return False


class Http1Protocol(H11Protocol):
    """Hypercorn's HTTP/1.1 protocol without the switch to HTTP/2, with JSON error bodies."""

    _refused = False
    """A prior-knowledge HTTP/2 preface was answered 505: no stream is created."""
    _head = b""
    """The start of the current request's head, until its end is seen (or the limit)."""

    async def handle(self, event: HypercornEvent) -> None:
        if isinstance(event, RawData) and len(self._head) < HEAD_LIMIT:
            self._head = (self._head + event.data)[:HEAD_LIMIT]
        await super().handle(event)

    async def _check_protocol(self, event: h11.Request) -> None:
        if event.method == b"PRI" and event.target == b"*":
            self._refused = True
            await self._send_error_response(505)
            await self.send(Closed())
        # ``Upgrade: h2c`` is not acted on: the request goes on in HTTP/1.1.

    async def _create_stream(self, request: h11.Request) -> None:
        if not self._refused:
            await super()._create_stream(request)

    async def _send_error_response(self, status_code: int) -> None:
        body = error_json(status_code)
        if status_code == 400 and token_header_split(self._head.split(b"\r\n\r\n", 1)[0]):
            status_code, body = 401, msgspec.json.encode({"error": MALFORMED_TOKEN})
        headers = [*_json_headers(body), *self.config.response_headers("h11")]
        await self._send_h11_event(h11.Response(status_code=status_code, headers=headers))
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())

    async def stream_send(self, event: StreamEvent) -> None:
        """A stream's own bodiless error answer (bad WebSocket handshake, app gone) gets JSON."""
        if (
            isinstance(event, Response)
            and event.status_code >= 400
            and set(event.headers) == _EMPTY_ERROR_HEADERS
        ):
            body = error_json(event.status_code)
            await super().stream_send(
                Response(
                    stream_id=event.stream_id,
                    status_code=event.status_code,
                    headers=_json_headers(body),
                )
            )
            await super().stream_send(Body(stream_id=event.stream_id, data=body))
            return
        await super().stream_send(event)


class Http1Server(TCPServer):
    """Hypercorn's TCP connection handler, speaking :class:`Http1Protocol`.

    ``TCPServer.run`` builds hypercorn's protocol wrapper and assigns it to
    ``self.protocol``; the setter swaps the wrapper's h11 protocol for ours before
    the first byte is read (nothing else of the connection changes).
    """

    _wrapper: ProtocolWrapper

    @property
    def protocol(self) -> ProtocolWrapper:
        return self._wrapper

    @protocol.setter
    def protocol(self, wrapper: ProtocolWrapper) -> None:
        if not isinstance(wrapper.protocol, Http1Protocol):
            wrapper.protocol = Http1Protocol(
                wrapper.app,
                wrapper.config,
                wrapper.context,
                wrapper.task_group,
                wrapper.state,
                wrapper.ssl,
                wrapper.client,
                wrapper.server,
                wrapper.send,
            )
        self._wrapper = wrapper


def _ended_by_shutdown(group: BaseExceptionGroup[BaseException]) -> bool:
    _, other = group.split(ShutdownError)
    return other is None


async def serve(
    app: ASGIApp,
    config: Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``config``'s plain TCP binds until ``shutdown_trigger`` returns.

    Then stop accepting, and give the connections in flight ``graceful_timeout``
    seconds before they are cancelled. Reports the bound URLs through ``task_status``.
    """
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")  # type: ignore[arg-type]
    context = WorkerContext(None)
    sockets = config.create_sockets()
    listeners = []
    binds = []
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
    handler = partial(Http1Server, wrapped, config, context, ConnectionState({}))
    async with trio.open_nursery() as connections:
        task_status.started(binds)
        try:
            async with trio.open_nursery(strict_exception_groups=True) as nursery:
                nursery.start_soon(raise_shutdown, shutdown_trigger)
                nursery.start_soon(
                    partial(trio.serve_listeners, handler, listeners, handler_nursery=connections)
                )
        except BaseExceptionGroup as group:
            if not _ended_by_shutdown(group):
                raise
        finally:
            await context.terminated.set()
            connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
