"""A model API on loopback: a raw HTTP/1.1 server over real sockets, byte for byte.

Each request is read whole, decoded, validated (``check``: the SDK request type
and the conversation rules; a broken body is answered ``400 invalid_request_error``
as the real API would, and kept in ``problems``) and answered by the next
:class:`Reply` (or by ``answer(seen)`` when the queue is empty). A reply writes its
body pieces one network write each (chunked transfer encoding), so a test decides
where a line, a JSON string or a UTF-8 character is cut. It can also drop the
connection before the first byte, or fall silent and hold the connection open.

While a reply is out, a watcher reads the socket: the moment the client closes it,
``Seen.closed_at`` is set (trio's clock) and ``closed`` fires, which is how a test
sees that a cancel closed the HTTP stream.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

Checker = Callable[[object], list[str]]


@dataclass
class Reply:
    status: int = 200
    chunks: tuple[bytes, ...] = ()
    """Body pieces, one write (and one HTTP chunk) each."""
    headers: tuple[tuple[str, str], ...] = ()
    gap: float = 0.0
    """Seconds between two pieces."""
    drop: bool = False
    """Close the connection before sending a byte."""
    hold: bool = False
    """After the pieces, stay silent with the connection open until the client leaves."""


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: object = None
    closed_at: float | None = None
    closed: trio.Event = field(default_factory=trio.Event)
    sent_at: float | None = None
    """When the last piece of the reply was written."""


class WireServer:
    def __init__(self, check: Checker, answer: Callable[[Seen], Reply] | None = None) -> None:
        self.check = check
        self.answer = answer
        self.replies: deque[Reply] = deque()
        self.requests: list[Seen] = []
        self.problems: list[str] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    @property
    def bodies(self) -> list[dict[str, object]]:
        return [s.body for s in self.requests if isinstance(s.body, dict)]

    async def serve(
        self, *, task_status: trio.TaskStatus[WireServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self._connection, listeners)
            task_status.started(self)

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            seen = await _read_request(stream)
            if seen is None:
                return
            self.requests.append(seen)
            try:
                seen.body = json.loads(seen.raw)
            except ValueError:
                seen.body = None
            problems = self.check(seen.body)
            if problems:
                self.problems += problems
                reply = _invalid(problems)
            elif self.replies:
                reply = self.replies.popleft()
            elif self.answer is not None:
                reply = self.answer(seen)
            else:
                reply = Reply(500, (b'{"error": {"message": "no reply queued"}}',))
            if reply.drop:
                return
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch, stream, seen, nursery.cancel_scope)
                try:
                    await _write(stream, reply, seen)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    await seen.closed.wait()
                nursery.cancel_scope.cancel()


async def _read_request(stream: trio.SocketStream) -> Seen | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        body += chunk
    return Seen(method, path, headers, body)


async def _watch(stream: trio.SocketStream, seen: Seen, scope: trio.CancelScope) -> None:
    """Sets ``closed_at`` when the client closes its side (or resets the connection)."""
    try:
        while await stream.receive_some(4096):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    seen.closed_at = trio.current_time()
    seen.closed.set()
    scope.cancel()


async def _write(stream: trio.SocketStream, reply: Reply, seen: Seen) -> None:
    streaming = reply.status == 200
    head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}"]
    head.append("content-type: " + ("text/event-stream" if streaming else "application/json"))
    head += [f"{k}: {v}" for k, v in reply.headers]
    if streaming:
        head += ["transfer-encoding: chunked", "cache-control: no-cache", "connection: close"]
    else:
        head += [f"content-length: {sum(map(len, reply.chunks))}", "connection: close"]
    await stream.send_all(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    for index, piece in enumerate(reply.chunks):
        if index and reply.gap:
            await trio.sleep(reply.gap)
        await stream.send_all(b"%x\r\n%s\r\n" % (len(piece), piece) if streaming else piece)
    seen.sent_at = trio.current_time()
    if reply.hold:
        await trio.sleep_forever()
    if streaming:
        await stream.send_all(b"0\r\n\r\n")
    await stream.send_eof()
    await seen.closed.wait()


def _invalid(problems: list[str]) -> Reply:
    error = {"type": "invalid_request_error", "message": "; ".join(problems)[:500]}
    return Reply(400, (json.dumps({"type": "error", "error": error}).encode(),))


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}
