"""Response streams in each API's documented SSE format, and where to cut them.

``anthropic_stream`` writes the Messages API's events (``message_start``, a
``ping``, ``content_block_start``/``_delta``/``_stop`` per block, ``message_delta``,
``message_stop``); ``openai_stream`` writes Chat Completions chunks ending with
``data: [DONE]``. Text and tool arguments are streamed in small fragments (several
deltas each); :func:`pieces` cuts the bytes into network writes of a few bytes, so
lines, JSON strings and UTF-8 characters are split between writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class Call:
    id: str
    name: str
    input: dict[str, object]


@dataclass
class Turn:
    """One response: optional thinking, text, calls, its stop and usage."""

    text: str = ""
    thinking: str = ""
    signature: str = ""
    calls: list[Call] = field(default_factory=list)
    stop: str | None = None
    input_tokens: int = 120
    output_tokens: int = 30
    cache_read: int = 0
    cache_write: int = 0
    raw_arguments: dict[str, str] = field(default_factory=dict)
    """Call id → the arguments to send as they are (to send broken JSON)."""


def fragments(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def pieces(data: bytes, size: int = 7) -> tuple[bytes, ...]:
    """``data`` cut into writes of ``size`` bytes (lines and UTF-8 characters split)."""
    return tuple(data[i : i + size] for i in range(0, len(data), size))


def _sse(event: str, data: dict[str, object]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def anthropic_stream(turn: Turn) -> bytes:
    stop = turn.stop or ("tool_use" if turn.calls else "end_turn")
    usage = {
        "input_tokens": turn.input_tokens,
        "cache_creation_input_tokens": turn.cache_write,
        "cache_read_input_tokens": turn.cache_read,
        "output_tokens": 1,
    }
    message: dict[str, object] = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-test",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    out = [_sse("message_start", {"type": "message_start", "message": message})]
    out.append('event: ping\ndata: {"type": "ping"}\n\n')
    index = 0

    def block(start: dict[str, object], deltas: list[dict[str, object]]) -> None:
        nonlocal index
        out.append(
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        for delta in deltas:
            out.append(
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1

    if turn.thinking:
        deltas: list[dict[str, object]] = [
            {"type": "thinking_delta", "thinking": f} for f in fragments(turn.thinking)
        ]
        deltas.append({"type": "signature_delta", "signature": turn.signature})
        block({"type": "thinking", "thinking": ""}, deltas)
    if turn.text:
        block(
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": f} for f in fragments(turn.text)],
        )
    for call in turn.calls:
        arguments = turn.raw_arguments.get(call.id, json.dumps(call.input))
        block(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": {}},
            [{"type": "input_json_delta", "partial_json": f} for f in fragments(arguments, 4)],
        )
    out.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": turn.output_tokens},
            },
        )
    )
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return "".join(out).encode()


def anthropic_error_event(kind: str, message: str) -> bytes:
    return _sse("error", {"type": "error", "error": {"type": kind, "message": message}}).encode()


def _chunk(delta: dict[str, object], finish: str | None = None) -> str:
    data = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1764720000,
        "model": "test-model",
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def openai_stream(
    turn: Turn, *, reasoning_field: str = "reasoning_content", done: bool = True
) -> bytes:
    out = [_chunk({"role": "assistant", "content": ""})]
    out += [_chunk({reasoning_field: f}) for f in fragments(turn.thinking)] if turn.thinking else []
    out += [_chunk({"content": f}) for f in fragments(turn.text)] if turn.text else []
    for index, call in enumerate(turn.calls):
        arguments = turn.raw_arguments.get(call.id, json.dumps(call.input))
        first = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        out.append(_chunk({"tool_calls": [first]}))
        out += [
            _chunk({"tool_calls": [{"index": index, "function": {"arguments": f}}]})
            for f in fragments(arguments, 4)
        ]
    finish = turn.stop or ("tool_calls" if turn.calls else "stop")
    out.append(_chunk({}, finish))
    usage = {
        "prompt_tokens": turn.input_tokens + turn.cache_read,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.input_tokens + turn.cache_read + turn.output_tokens,
        "prompt_tokens_details": {"cached_tokens": turn.cache_read},
    }
    tail = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1764720000,
        "model": "test-model",
        "choices": [],
        "usage": usage,
    }
    out.append(f"data: {json.dumps(tail)}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def error_body(kind: str, message: str, *, openai: bool = False) -> bytes:
    if openai:
        return json.dumps(
            {"error": {"message": message, "type": kind, "param": None, "code": kind}}
        ).encode()
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
