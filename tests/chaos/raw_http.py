"""Raw HTTP/1.1 over loopback sockets: bytes no client library would send, slow clients.

Used by the hostile-input suite (``test_hostile_http.py``).
"""

from __future__ import annotations

import json
import socket
import struct

import trio


async def exchange(port: int, data: bytes, *, read: bool = True) -> bytes:
    """Send raw bytes, read the answer until the server closes (or 10 s pass)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        if not read:
            return b""
        answer = bytearray()
        with trio.move_on_after(10):
            while chunk := await stream.receive_some(65536):
                answer += chunk
        return bytes(answer)


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:100]
    return int(answer[9:12])


def request_bytes(
    method: str,
    target: bytes,
    token: str,
    body: bytes = b"",
    *,
    length: int | None = None,
    chunks: list[bytes] | None = None,
    **headers: bytes,
) -> bytes:
    """Raw request bytes; ``length`` overrides content-length, ``chunks`` sends chunked."""
    lines = [method.encode() + b" " + target + b" HTTP/1.1", b"host: x", b"connection: close"]
    lines.append(b"x-token: " + token.encode("latin-1"))
    lines += [name.replace("_", "-").encode() + b": " + value for name, value in headers.items()]
    if chunks is not None:
        lines.append(b"transfer-encoding: chunked")
        body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in [*chunks, b""])
    elif body or method == "POST":
        lines.append(b"content-length: %d" % (len(body) if length is None else length))
    if method == "POST":
        lines.append(b"content-type: application/json")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def bad_inputs(token: str) -> list[tuple[str, bytes, tuple[int, ...]]]:
    """``(name, raw request, acceptable statuses)``."""
    chat, history = b"/api/web/chat", b"/api/web/history"
    big_message = json.dumps({"message": "m" * (2 << 20)}).encode()
    nested = b'{"message":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    return [
        ("body over 4 MiB", request_bytes("POST", chat, token, b"x" * ((4 << 20) + 1)), (413,)),
        ("message over the event cap", request_bytes("POST", chat, token, big_message), (413,)),
        ("declares 1 GB", request_bytes("POST", chat, token, b'{"m', length=10**9), (413,)),
        (
            "chunked, over 4 MiB",
            request_bytes("POST", chat, token, chunks=[b"c" * (1 << 20)] * 5),
            (413,),
        ),
        (
            "lying content-length",
            request_bytes("POST", chat, token, b'{"message": "hi"}', length=4),
            (400,),
        ),
        ("deep nesting", request_bytes("POST", chat, token, nested), (400,)),
        (
            "broken utf-8 body",
            request_bytes("POST", chat, token, b'{"message": "\xff\xfe\xc3"}'),
            (400,),
        ),
        (
            "lone surrogate",
            request_bytes("POST", chat, token, b'{"message": "\\udcff"}'),
            (200, 400),
        ),
        (
            "broken utf-8 in the query",
            request_bytes("GET", history + b"?sessionId=%ff%fe", token),
            (400,),
        ),
        (
            "raw bytes in the query",
            request_bytes("GET", history + b"?sessionId=\xff\xfe", token),
            (400,),
        ),
        (
            "raw bytes in an id header",
            request_bytes("GET", history, token, x_session_id=b"web_alice_\xff"),
            (400,),
        ),
        ("raw bytes in the token", request_bytes("GET", history, "hat_\xff"), (401,)),
        (
            "raw bytes in Last-Event-ID",
            request_bytes("GET", b"/api/web/subscribe", token, last_event_id=b"1\xff"),
            (400,),
        ),
        (
            "raw bytes in the workspace",
            request_bytes("GET", b"/api/web/sessions", token, x_workspace=b"/\xff"),
            (400, 403),
        ),
        ("raw bytes in the path", request_bytes("GET", b"/api/web/\xff", token), (400, 404)),
        ("a target that is not a path", request_bytes("GET", b"*", token), (400, 404)),
        (
            "a 20 KB header",
            request_bytes("GET", history, token, x_pad=b"p" * 20_000),
            (200, 400, 431),
        ),
    ]


# --- slow clients -------------------------------------------------------------------


async def connect(port: int, *, rcvbuf: int | None = None) -> trio.SocketStream:
    sock = trio.socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)


async def until_dropped(stream: trio.SocketStream) -> bytes:
    """Read until the server closes the connection; what it said."""
    said = bytearray()
    try:
        while chunk := await stream.receive_some(65536):
            said += chunk
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    return bytes(said)


async def is_gone(stream: trio.SocketStream) -> bool:
    """True if the server has forgotten the connection: a write draws a reset.

    (A connection the kernel dropped for ``TCP_USER_TIMEOUT`` sends nothing to the
    peer; only the peer's next segment finds out.)"""
    try:
        for _ in range(20):
            await stream.send_all(b"\r\n")
            await trio.sleep(0.05)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return True
    return False


async def trickle(stream: trio.SocketStream, data: bytes, every: float) -> None:
    """Send ``data`` one byte at a time until it is sent or the server hangs up."""
    try:
        for i in range(len(data)):
            await stream.send_all(data[i : i + 1])
            await trio.sleep(every)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


def abandon(stream: trio.SocketStream, how: str) -> None:
    """Drop a connection without a goodbye: ``reset`` (RST) or ``close`` (FIN)."""
    if how == "reset":
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()
