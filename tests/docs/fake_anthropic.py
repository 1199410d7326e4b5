"""A small Anthropic Messages endpoint on loopback, for the docs that use a real model.

``POST /v1/messages`` with ``stream: true`` is answered with the API's SSE event
sequence (``message_start`` … ``message_stop``). The "model" is a fixed policy: if
the request offers a tool named ``word_count`` and has no tool result yet, it calls
it on ``notes.txt``; with a result, it answers with the result's text; otherwise it
says hello. A request without the ``x-api-key`` header or with a body that is no
Messages request gets the API's 400/401 error body. The full wire-format checks are
in ``tests/models``; this server only has to be a believable endpoint.
"""

from __future__ import annotations

import json

import trio

KEY = "sk-ant-docs-test"


def _sse(kind: str, data: dict[str, object]) -> str:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n"


def _stream(text: str = "", call: tuple[str, dict[str, object]] | None = None) -> bytes:
    message: dict[str, object] = {
        "id": "msg_docs",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-docs",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 1},
    }
    out = [_sse("message_start", {"type": "message_start", "message": message})]
    blocks: list[tuple[dict[str, object], dict[str, object]]] = []
    if text:
        first: dict[str, object] = {"type": "text", "text": ""}
        blocks.append((first, {"type": "text_delta", "text": text}))
    if call is not None:
        start: dict[str, object] = {"type": "tool_use", "id": "toolu_docs_1", "name": call[0]}
        start["input"] = {}
        blocks.append((start, {"type": "input_json_delta", "partial_json": json.dumps(call[1])}))
    for index, (start, delta) in enumerate(blocks):
        out.append(
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        out.append(
            _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = "tool_use" if call is not None else "end_turn"
    out.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 12},
            },
        )
    )
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return "".join(out).encode()


def answer(body: dict[str, object]) -> bytes:
    """The SSE body answering one Messages request."""
    messages = body.get("messages")
    tools = body.get("tools") or []
    assert isinstance(messages, list) and isinstance(tools, list)
    results = [
        block.get("content")
        for message in messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    if results:
        content = results[-1]
        text = content if isinstance(content, str) else json.dumps(content)
        return _stream(f"The tool says: {text}")
    if any(isinstance(t, dict) and t.get("name") == "word_count" for t in tools):
        return _stream("Counting.", ("word_count", {"path": "notes.txt"}))
    return _stream("Hello from the model.")


async def _read(stream: trio.SocketStream) -> tuple[dict[str, str], bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    while len(body) < int(headers.get("content-length", "0")):
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        body += chunk
    return headers, body


def _response(status: int, content_type: str, body: bytes) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
    head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    return head.encode() + body


def _error(status: int, kind: str, message: str) -> bytes:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return _response(status, "application/json", json.dumps(body).encode())


async def _connection(stream: trio.SocketStream) -> None:
    async with stream:
        request = await _read(stream)
        if request is None:
            return
        headers, raw = request
        if headers.get("x-api-key") != KEY:
            await stream.send_all(_error(401, "authentication_error", "invalid x-api-key"))
            return
        try:
            body = json.loads(raw)
            assert body.get("stream") is True and isinstance(body.get("messages"), list)
            reply = answer(body)
        except (ValueError, AssertionError):
            await stream.send_all(_error(400, "invalid_request_error", "not a Messages request"))
            return
        await stream.send_all(_response(200, "text/event-stream", reply))


async def serve(*, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve on a free loopback port; ``task_status.started`` gets the base URL."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, _connection, listeners)
        task_status.started(f"http://127.0.0.1:{port}")
