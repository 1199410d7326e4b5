"""The OpenAI Chat Completions API: ``POST {OPENAI_BASE_URL}/chat/completions`` with
``"stream": true`` (OpenAI itself, and the servers that speak it: Ollama, vLLM,
llama.cpp, LM Studio, OpenRouter, Groq, DeepSeek, gateways).

Translation only (``docs/design/models.md``). The runtime's conversation is made of
Anthropic-shaped blocks; here the system prompt becomes the first message, a user
message's tool results become ``role: tool`` messages (each right after the
assistant message that called it), images become data URLs, and thinking (which
this API cannot take back) is left out.

Stream rules: ``choices[0].delta`` carries ``content``, ``reasoning_content`` (or
``reasoning``) and ``tool_calls`` fragments keyed by ``index``; the calls are
complete at ``finish_reason`` and come back as one batch, in index order; usage
arrives in a last chunk with no choices (``stream_options.include_usage``);
``data: [DONE]`` ends the stream. A server that says ``stop`` while returning calls
is read as ``tool_calls``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, Mapping
from typing import Final

import msgspec

from ...core.conversation import ImageBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from ..model import (
    COMPACT_INSTRUCTION,
    ModelEvent,
    ModelRequest,
    Stop,
    StopReason,
    TextDelta,
    ThinkingDelta,
)
from .anthropic import image_source
from .calls import Json, read_stream, tool_use
from .options import ModelConfigError, ModelOptions, ModelSpec
from .retry import RetryPolicy, with_retries
from .sse import SseEvent
from .transport import Endpoint, HttpSession, sse_events, stream_error

DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_ENV, BASE_ENV = "OPENAI_API_KEY", "OPENAI_BASE_URL"

STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "content_filter": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


class OpenAIModel:
    """Implements the ``Model`` protocol for one model behind a Chat Completions endpoint."""

    provider: Final = "openai"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        options: ModelOptions | None = None,
        retry: RetryPolicy | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        base = (base_url or env.get(BASE_ENV) or DEFAULT_BASE_URL).rstrip("/")
        key = api_key if api_key is not None else env.get(KEY_ENV, "")
        if not key and base == DEFAULT_BASE_URL:
            raise ModelConfigError(f"openai:{model} needs an API key: set {KEY_ENV}")
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        self.model = model
        self.options = options or ModelOptions()
        self.retry = retry or RetryPolicy()
        self.official = base == DEFAULT_BASE_URL
        """OpenAI's own API: ``max_completion_tokens``; other servers know ``max_tokens``."""
        self.endpoint = Endpoint("openai", f"{base}/chat/completions", headers, KEY_ENV, key)
        self._session = HttpSession(self.retry)

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r}, url={self.endpoint.url!r})"

    def with_options(self, options: ModelOptions) -> OpenAIModel:
        twin = object.__new__(OpenAIModel)
        twin.__dict__.update(self.__dict__, options=options, _session=HttpSession(self.retry))
        return twin

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec(self.provider, self.model)

    async def aclose(self) -> None:
        await self._session.aclose()

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        body = msgspec.json.encode(request_body(self.model, self.options, request, self.official))
        return with_retries(lambda: self._attempt(body), self.retry, f"openai:{self.model}")

    def _attempt(self, body: bytes) -> AsyncGenerator[ModelEvent, None]:
        events = sse_events(self._session, self.endpoint, body)
        return read_stream(events, StreamReader(self.endpoint), "a finish_reason")


# --- request body ------------------------------------------------------------------


def request_body(
    model: str, options: ModelOptions, request: ModelRequest, official: bool = False
) -> Json:
    messages: list[Json] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages += to_messages(request.messages)
    if request.purpose == "compact":
        messages.append({"role": "user", "content": COMPACT_INSTRUCTION})
    body: Json = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in request.tools
        ]
        if request.purpose == "compact":
            body["tool_choice"] = "none"
    if options.max_tokens is not None:
        body["max_completion_tokens" if official else "max_tokens"] = options.max_tokens
    if options.temperature is not None:
        body["temperature"] = options.temperature
    return body


def to_messages(conversation: tuple[Message, ...]) -> list[Json]:
    out: list[Json] = []
    for message in conversation:
        out += _assistant(message) if message.role == "assistant" else _user(message)
    return out


def _assistant(message: Message) -> list[Json]:
    text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": json.dumps(b.input)},
        }
        for b in message.content
        if isinstance(b, ToolUseBlock)
    ]
    if not text and not calls:
        return []  # thinking only: nothing this API can take
    out: Json = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = calls
    return [out]


def _user(message: Message) -> list[Json]:
    out: list[Json] = [
        {"role": "tool", "tool_call_id": b.tool_use_id, "content": b.content}
        for b in message.content
        if isinstance(b, ToolResultBlock)
    ]
    parts: list[Json] = []
    for block in message.content:
        if isinstance(block, TextBlock) and block.text:
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append({"type": "image_url", "image_url": {"url": image_url(block)}})
    if parts and all(p["type"] == "text" for p in parts):
        out.append({"role": "user", "content": "".join(str(p["text"]) for p in parts)})
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def image_url(image: ImageBlock) -> str:
    source = image_source(image)
    if source["type"] == "url":
        return str(source["url"])
    return f"data:{source['media_type']};base64,{source['data']}"


# --- response stream ----------------------------------------------------------------


class _Call(msgspec.Struct):
    id: str = ""
    name: str = ""
    parts: list[str] = msgspec.field(default_factory=list)


class StreamReader:
    """Turns one response's chunks into model events; ``stop`` is set at its end."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._calls: dict[int, _Call] = {}
        self._finish: str | None = None
        self._usage: Json = {}
        self.stop: Stop | None = None

    def feed(self, sse: SseEvent) -> list[ModelEvent]:
        if sse.data.strip() == "[DONE]":
            return self.at_eof()
        try:
            chunk = msgspec.json.decode(sse.data)
        except ValueError:
            raise stream_error(self._endpoint, {"error": sse.data[:200]}) from None
        if "error" in chunk:
            raise stream_error(self._endpoint, chunk)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        out: list[ModelEvent] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            out += self._delta(choice.get("delta") or {})
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return out

    def _delta(self, delta: Json) -> list[ModelEvent]:
        out: list[ModelEvent] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out.append(ThinkingDelta(reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            out.append(TextDelta(content))
        for fragment in delta.get("tool_calls") or ():  # type: ignore[attr-defined]
            call = self._calls.setdefault(fragment.get("index", len(self._calls)), _Call())
            call.id = fragment.get("id") or call.id
            function = fragment.get("function") or {}
            call.name = function.get("name") or call.name
            if function.get("arguments"):
                call.parts.append(function["arguments"])
        return out

    def at_eof(self) -> list[ModelEvent]:
        """``[DONE]``, or the body's end after a ``finish_reason`` (some servers send no
        ``[DONE]``): the batch of calls, then the stop."""
        if self._finish is None:
            return []
        self.stop = self._stop()
        return self.calls()

    def _stop(self) -> Stop:
        usage = self._usage
        prompt = _int(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
        reason = STOP_REASONS.get(self._finish or "stop", "end_turn")
        if self._calls and reason == "end_turn":
            reason = "tool_use"
        return Stop(
            reason,
            input_tokens=max(0, prompt - cached),
            output_tokens=_int(usage.get("completion_tokens")),
            cache_read_tokens=cached,
        )

    def calls(self) -> list[ModelEvent]:
        return [
            tool_use(call.id or f"call_{index}", call.name, "".join(call.parts))
            for index, call in sorted(self._calls.items())
        ]


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
