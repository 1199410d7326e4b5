"""A fault-injecting TCP proxy between the adapter and the server, HTTP/1.1 aware.

Client → server, each request head is parsed (httpx never pipelines), so a rule
can pick a request by route: let it through (recording its headers), refuse it
(close the connection without an answer), hold it until the test releases it,
answer it with a canned body, or cut its response stream. Server → client bytes
are relayed as they come; for a cut, the SSE ``data:`` lines are counted and the
connection is closed in the middle of the next frame after ``after_frames``
(its ``id:`` line and chunk header went out, its data did not), both ways, like
a proxy or network that gives up. ``strip_last_event_id`` plays a server without
resume: the ``Last-Event-ID`` header never reaches it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import trio

Action = Literal["refuse", "hold", "answer", "cut", "stall"]
DATA = b"data: "


@dataclass
class Seen:
    method: str
    path: str
    """With its query string."""
    headers: dict[str, str]
    """As the adapter sent them (lower-case names)."""
    at: float
    """``trio.current_time()`` when the head arrived."""
    body: bytes = b""

    @property
    def route(self) -> str:
        return self.path.split("?", 1)[0]


@dataclass
class Rule:
    route: str
    action: Action
    times: int
    """Requests left for this rule to take; -1 forever."""
    after_frames: int = 0
    answer: bytes = b""
    gate: trio.Event = field(default_factory=trio.Event)
    """A held request goes on when this is set."""


@dataclass
class _Relay:
    cut_after: int | None = None
    stall: bool = False
    """At the limit, go silent instead of closing."""
    stalled: bool = False
    frames: int = 0
    tail: bytes = b""


class _Cut(Exception):
    pass


class FaultProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.seen: list[Seen] = []
        self.cuts = 0
        """Streams cut (or stalled) so far."""
        self.keepalives = 0
        """``: keepalive`` comments relayed so far (every connection)."""
        self.strip_last_event_id = False
        self._rules: list[Rule] = []
        self._arrived = trio.Event()

    # --- rules ------------------------------------------------------------------

    def refuse(self, route: str, times: int = 1) -> Rule:
        return self._add(Rule(route, "refuse", times))

    def hold(self, route: str, times: int = 1) -> Rule:
        """Held requests go on when ``rule.gate.set()`` is called."""
        return self._add(Rule(route, "hold", times))

    def answer(self, route: str, body: bytes, times: int = 1) -> Rule:
        return self._add(Rule(route, "answer", times, answer=body))

    def cut(self, route: str, after_frames: int, times: int = 1) -> Rule:
        return self._add(Rule(route, "cut", times, after_frames=after_frames))

    def stall(self, route: str, after_frames: int, times: int = 1) -> Rule:
        """Like ``cut``, but the connection stays open and silent (keepalives too)."""
        return self._add(Rule(route, "stall", times, after_frames=after_frames))

    def clear(self) -> None:
        for rule in self._rules:
            rule.gate.set()
        self._rules.clear()

    def _add(self, rule: Rule) -> Rule:
        self._rules.append(rule)
        return rule

    def _take(self, route: str) -> Rule | None:
        for rule in self._rules:
            if rule.route == route and rule.times != 0:
                rule.times -= 1 if rule.times > 0 else 0
                return rule
        return None

    # --- what the adapter did ----------------------------------------------------

    def requests(self, route: str) -> list[Seen]:
        return [s for s in self.seen if s.route == route]

    async def wait_requests(self, route: str, count: int = 1) -> list[Seen]:
        """Until ``count`` requests for ``route`` have arrived (the caller's deadline)."""
        while len(self.requests(route)) < count:
            await self._arrived.wait()
        return self.requests(route)

    async def wait_cuts(self, count: int = 1) -> None:
        await self.wait_for(lambda: self.cuts >= count)

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._arrived.wait()

    def _changed(self) -> None:
        self._arrived.set()
        self._arrived = trio.Event()

    # --- serving --------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, client: trio.SocketStream) -> None:
        upstream: trio.SocketStream | None = None
        relay = _Relay()
        try:
            async with trio.open_nursery() as nursery:
                buffer = bytearray()
                while True:
                    head = await _read_head(client, buffer)
                    if head is None:
                        break
                    method, path, lines = head
                    headers = dict(_header(line) for line in lines)
                    at = trio.current_time()
                    size = int(headers.get("content-length", 0))
                    body = await _read_exactly(client, buffer, size)
                    self.seen.append(Seen(method, path, headers, at, body))
                    self._changed()
                    rule = self._take(path.split("?", 1)[0])
                    if rule is not None and rule.action == "refuse":
                        break
                    if rule is not None and rule.action == "answer":
                        await client.send_all(_response(rule.answer))
                        continue
                    if rule is not None and rule.action == "hold":
                        await rule.gate.wait()
                    if upstream is None:
                        upstream = await trio.open_tcp_stream("127.0.0.1", self.upstream_port)
                        nursery.start_soon(self._relay, upstream, client, relay, nursery)
                    limited = rule is not None and rule.action in ("cut", "stall")
                    relay.cut_after = rule.after_frames if rule and limited else None
                    relay.stall = rule is not None and rule.action == "stall"
                    relay.frames, relay.tail, relay.stalled = 0, b"", False
                    kept = [ln for ln in lines if not self._dropped(ln)]
                    request = b"\r\n".join([f"{method} {path} HTTP/1.1".encode(), *kept])
                    await upstream.send_all(request + b"\r\n\r\n" + body)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await client.aclose()
                if upstream is not None:
                    await upstream.aclose()

    def _dropped(self, line: bytes) -> bool:
        return self.strip_last_event_id and line.lower().startswith(b"last-event-id:")

    async def _relay(
        self,
        upstream: trio.SocketStream,
        client: trio.SocketStream,
        relay: _Relay,
        nursery: trio.Nursery,
    ) -> None:
        try:
            while data := await upstream.receive_some(65536):
                if relay.stalled:
                    continue
                self.keepalives += data.count(b": keepalive")
                try:
                    await client.send_all(self._until_cut(relay, data))
                except _Cut as cut:
                    await client.send_all(cut.args[0])
                    self.cuts += 1
                    self._changed()
                    if not relay.stall:
                        break
                    relay.stalled = True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        nursery.cancel_scope.cancel()

    @staticmethod
    def _until_cut(relay: _Relay, data: bytes) -> bytes:
        """``data``, or raise :class:`_Cut` with the part before the frame past the limit."""
        window = relay.tail + data
        start = 0
        while (found := window.find(DATA, start)) >= 0:
            start = found + 1
            relay.frames += 1
            if relay.cut_after is not None and relay.frames > relay.cut_after:
                raise _Cut(data[: max(found - len(relay.tail), 0)])
        relay.tail = window[-(len(DATA) - 1) :]
        return data


async def _read_head(
    stream: trio.SocketStream, buffer: bytearray
) -> tuple[str, str, list[bytes]] | None:
    """(method, path, header lines) of the next request; None when the client closed."""
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        try:
            chunk = await stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return None
        if not chunk:
            return None
        buffer += chunk
    head = bytes(buffer[:end])
    del buffer[: end + 4]
    first, *lines = head.split(b"\r\n")
    method, path, _ = first.decode().split(" ", 2)
    return method, path, lines


def _header(line: bytes) -> tuple[str, str]:
    name, _, value = line.decode().partition(":")
    return name.strip().lower(), value.strip()


async def _read_exactly(stream: trio.SocketStream, buffer: bytearray, size: int) -> bytes:
    while len(buffer) < size:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        buffer += chunk
    body = bytes(buffer[:size])
    del buffer[:size]
    return body


def _response(body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body
