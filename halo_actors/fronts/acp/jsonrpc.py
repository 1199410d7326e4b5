"""A JSON-RPC 2.0 peer over newline-delimited JSON on a pair of trio streams.

Invariants:
- every request runs in its own task, so a ``session/cancel`` is read while a
  ``session/prompt`` is still in flight; notifications too;
- every request gets exactly one answer: its handler's result, the
  :class:`RpcError` it raised, -32601 for an unknown method, or -32603 without a
  traceback for anything else (logged on stderr); unknown notifications and
  answers to requests we never sent are ignored;
- bad input never ends the connection: a line that is not JSON gets -32700, a
  message that is not a JSON-RPC 2.0 object gets -32600 (both with ``id: null``
  when no id can be read), a line longer than :data:`MAX_LINE` is skipped whole;
- output lines are written by one lock-holder at a time, so they never
  interleave; once the other side stops reading, later writes are dropped;
- at end of input, ``on_eof`` runs (the adapter abandons its prompts) and the
  handlers still running get :data:`EOF_GRACE` seconds to answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Final

import msgspec
import trio

from halo_actors.core.logger import get_logger

log = get_logger("halo_actors.acp")

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
MAX_LINE = 16 * 1024 * 1024
"""Bytes in one input line; a longer line is skipped and answered -32700."""
EOF_GRACE = 5.0
"""Seconds the handlers still running at end of input get to answer."""

Params = dict[str, object]
Handler = Callable[[Params], Awaitable[object]]
NotificationHandler = Callable[[Params], Awaitable[None]]


class RpcError(Exception):
    """Raised by a handler: answered as ``{"error": {"code", "message"}}``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class JsonRpcPeer:
    def __init__(
        self,
        receive: trio.abc.ReceiveStream,
        send: trio.abc.SendStream,
        requests: Mapping[str, Handler],
        notifications: Mapping[str, NotificationHandler],
        on_eof: Callable[[], None] | None = None,
    ) -> None:
        self._receive = receive
        self._send = send
        self._requests = requests
        self._notifications = notifications
        self._on_eof = on_eof
        self._write_lock = trio.Lock()
        self._output_closed = False
        """Set when a write failed: the other side has gone, later writes are dropped."""

    async def notify(self, method: str, params: Params) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def _write(self, message: Mapping[str, object]) -> None:
        async with self._write_lock:
            if self._output_closed:
                return
            try:
                await self._send.send_all(_encode(message) + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._output_closed = True
                log.warning("acp_output_closed")

    async def serve(self) -> None:
        """Read until end of input; every handler task has ended when this returns."""
        async with trio.open_nursery() as nursery:
            async for line in _lines(self._receive):
                if line is None:
                    await self._error(None, PARSE_ERROR, f"line longer than {MAX_LINE} bytes")
                elif line.strip():
                    await self._dispatch(line, nursery)
            if self._on_eof is not None:
                self._on_eof()
            nursery.cancel_scope.deadline = trio.current_time() + EOF_GRACE

    async def _dispatch(self, line: bytes, nursery: trio.Nursery) -> None:
        try:
            message = _decode(line)
        except msgspec.DecodeError:
            await self._error(None, PARSE_ERROR, "parse error: not JSON")
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            await self._error(_id_of(message), INVALID_REQUEST, "not a JSON-RPC 2.0 message")
            return
        method = message.get("method")
        if method is None and ("result" in message or "error" in message):
            return  # an answer: we send no requests, so nothing waits for it
        if not isinstance(method, str):
            await self._error(_id_of(message), INVALID_REQUEST, "method must be a string")
            return
        params = message.get("params", {})
        if "id" not in message:
            handler = self._notifications.get(method)
            if handler is not None and isinstance(params, dict):
                nursery.start_soon(handler, params)
            return
        if not isinstance(params, dict):
            await self._error(message["id"], INVALID_PARAMS, "params must be an object")
            return
        nursery.start_soon(self._answer, message["id"], method, params)

    async def _answer(self, request_id: object, method: str, params: Params) -> None:
        handler = self._requests.get(method)
        if handler is None:
            await self._error(request_id, METHOD_NOT_FOUND, f"method not found: {method}")
            return
        try:
            result = await handler(params)
        except RpcError as exc:
            await self._error(request_id, exc.code, exc.message)
            return
        except Exception:
            log.exception("acp_handler_failed", method=method)
            await self._error(request_id, INTERNAL_ERROR, "internal error")
            return
        await self._write({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _error(self, request_id: object, code: int, message: str) -> None:
        error = {"code": code, "message": message}
        await self._write({"jsonrpc": "2.0", "id": request_id, "error": error})


def _id_of(message: object) -> object:
    return message.get("id") if isinstance(message, dict) else None


async def _lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[bytes | None]:
    """Each input line without its newline; ``None`` for a line over :data:`MAX_LINE`."""
    buffer = bytearray()
    skipping = False
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            if buffer and not skipping:
                yield bytes(buffer)
            return
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            if skipping:
                skipping = False
            else:
                yield bytes(buffer[:end])
            del buffer[: end + 1]
        if len(buffer) > MAX_LINE and not skipping:
            skipping = True
            log.warning("acp_line_too_long", limit=MAX_LINE)
            yield None
        if skipping:
            buffer.clear()
