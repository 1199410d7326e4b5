"""Lean SSE clients for the load suite: raw HTTP/1.1 on loopback, compact records.

A thousand httpx streams would make the client the bottleneck, so a stream here is
a socket, a chunked-transfer decoder and an SSE splitter; frames are decoded only
as far as their ``type``. What a client keeps is compact (:class:`Track`: arrays
of ids), so a five-minute run with a thousand clients stays small.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import msgspec
import trio

RECORD_FRAMES = frozenset({b"user", b"thinking", b"stream", b"tool_call", b"tool_result", b"error"})


class _Typed(msgspec.Struct):
    type: str


_typed = msgspec.json.Decoder(_Typed)


@dataclass
class Track:
    """One logical stream of one session over every connection it took.

    ``shown``: ids of frames that each show one stored record (complete frames
    included, except an idle session's own answer, whose id is its cursor); the
    check keeps only completes that are terminal records of the session.
    """

    session_id: str
    follower: bool = False
    """Follows its session for the whole run (it must reach the end of the log)."""
    start: int | None = None
    covered: int = 0
    shown: array[int] = field(default_factory=lambda: array("q"))
    completes: array[int] = field(default_factory=lambda: array("q"))
    resumed: int = 0
    moved: list[str] = field(default_factory=list)
    """Resumes that opened somewhere other than where they asked (a bug)."""
    last_id: int | None = None
    frames: int = 0


@dataclass
class Answer:
    end: str = "eof"
    """``complete``, ``queued``, ``eof`` (closed without one), ``status <n>``, ``cut``."""
    news: int = 0
    """Frames other than ``complete`` this connection carried."""


async def sse(
    port: int,
    method: str,
    target: str,
    token: str,
    track: Track,
    *,
    body: bytes = b"",
    resume: bool = False,
) -> Answer:
    """One SSE request; every frame goes into ``track``."""
    head = [f"{method} {target} HTTP/1.1", "host: load", f"x-token: {token}"]
    head.append("connection: close")
    if resume and track.last_id is not None:
        head.append(f"last-event-id: {track.last_id}")
        track.resumed += 1
    if method == "POST":
        head += ["content-type: application/json", f"content-length: {len(body)}"]
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    answer = Answer()
    sent_after = track.last_id if resume else None
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            await _read(stream, track, answer, sent_after)
    except (OSError, trio.BrokenResourceError):
        answer.end = "cut"
    return answer


async def _read(
    stream: trio.SocketStream, track: Track, answer: Answer, sent_after: int | None
) -> None:
    raw = bytearray()
    while b"\r\n\r\n" not in raw:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        raw += chunk
    head, _, rest = bytes(raw).partition(b"\r\n\r\n")
    status = int(head[9:12])
    if status != 200:
        answer.end = f"status {status}"
        return
    decoder = _Chunked(rest)
    cursor: list[int | None] = [None]
    while True:
        for event in decoder.events():
            _frame(event, track, answer, cursor, sent_after)
        if decoder.done:
            return
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        decoder.feed(chunk)


def _frame(
    event: bytes, track: Track, answer: Answer, cursor: list[int | None], sent_after: int | None
) -> None:
    event_id, data = None, b""
    for line in event.split(b"\n"):
        if line.startswith(b"id: "):
            event_id = int(line[4:])
        elif line.startswith(b"data: "):
            data = line[6:]
    if event_id is None or not data:
        return  # a keepalive comment
    kind = _typed.decode(data).type.encode()
    track.frames += 1
    track.last_id = event_id
    if cursor[0] is None:  # the session frame opens every stream
        cursor[0] = event_id
        if track.start is None:
            track.start = track.covered = event_id
        if sent_after is not None and event_id != sent_after:
            track.moved.append(f"resumed after {sent_after}, opened at {event_id}")
        return
    if kind == b"queued":
        answer.end = "queued"
        return
    track.covered = max(track.covered, event_id)
    if kind == b"complete":
        answer.end = "complete"
        if event_id != cursor[0]:
            track.completes.append(event_id)
        return
    answer.news += 1
    if kind in RECORD_FRAMES:
        track.shown.append(event_id)


class _Chunked:
    """Transfer-Encoding: chunked → SSE events (split on blank lines)."""

    def __init__(self, initial: bytes) -> None:
        self._raw = bytearray(initial)
        self._text = bytearray()
        self.done = False

    def feed(self, data: bytes) -> None:
        self._raw += data

    def events(self) -> list[bytes]:
        raw = self._raw
        while not self.done:
            end = raw.find(b"\r\n")
            if end < 0:
                break
            size = int(bytes(raw[:end]).split(b";")[0], 16)
            if size == 0:
                self.done = True
                break
            if len(raw) < end + 2 + size + 2:
                break
            self._text += raw[end + 2 : end + 2 + size]
            del raw[: end + 2 + size + 2]
        out = []
        while (cut := self._text.find(b"\n\n")) >= 0:
            out.append(bytes(self._text[:cut]))
            del self._text[: cut + 2]
        return out
