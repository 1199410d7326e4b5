"""The Anthropic Messages API: ``POST {ANTHROPIC_BASE_URL}/v1/messages`` with ``"stream": true``.

Translation only (``docs/design/models.md``): the runtime's conversation becomes a
request body, the SSE stream becomes model events. Prompt caching marks three
breakpoints: the system prompt, the last tool, and the last block of the
conversation, so each call of a long agent loop reads the earlier prefix from the
cache. Thinking blocks go back with their signatures (the API checks them in
tool loops); a thinking block without one (another model's) is left out.

Stream rules: ``content_block_*`` events by ``index``; ``input_json_delta``
fragments join into one tool input, parsed at ``content_block_stop`` (not an
object → ``ToolUse.input_error``); ``ping`` is ignored; an ``error`` event is
classified like an HTTP status; a stream that ends before ``message_stop`` failed.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, Mapping
from typing import Final

import msgspec

from ...core.conversation import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ..model import (
    COMPACT_INSTRUCTION,
    ModelEvent,
    ModelRequest,
    Stop,
    StopReason,
    TextDelta,
    ThinkingDelta,
)
from .calls import Json, read_stream, tool_use
from .options import DEFAULT_ANTHROPIC_MAX_TOKENS, ModelConfigError, ModelOptions, ModelSpec
from .retry import RetryPolicy, Transient, with_retries
from .sse import SseEvent
from .transport import Endpoint, HttpSession, sse_events, stream_error

API_VERSION = "2023-06-01"
DEFAULT_BASE_URL = "https://api.anthropic.com"
KEY_ENV, BASE_ENV = "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"
EPHEMERAL = {"type": "ephemeral"}

STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "pause_turn": "end_turn",
    "refusal": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
}


class AnthropicModel:
    """Implements the ``Model`` protocol for one Anthropic model."""

    provider: Final = "anthropic"

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
            raise ModelConfigError(f"anthropic:{model} needs an API key: set {KEY_ENV}")
        headers = {
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        if key:
            headers["x-api-key"] = key
        self.model = model
        self.options = options or ModelOptions()
        self.retry = retry or RetryPolicy()
        self.endpoint = Endpoint("anthropic", f"{base}/v1/messages", headers, KEY_ENV, key)
        self._session = HttpSession(self.retry)

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model!r}, url={self.endpoint.url!r})"

    def with_options(self, options: ModelOptions) -> AnthropicModel:
        """The same model and endpoint with other per-response options."""
        twin = object.__new__(AnthropicModel)
        twin.__dict__.update(self.__dict__, options=options, _session=HttpSession(self.retry))
        return twin

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec(self.provider, self.model)

    async def aclose(self) -> None:
        await self._session.aclose()

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        body = msgspec.json.encode(request_body(self.model, self.options, request))
        return with_retries(lambda: self._attempt(body), self.retry, f"anthropic:{self.model}")

    def _attempt(self, body: bytes) -> AsyncGenerator[ModelEvent, None]:
        events = sse_events(self._session, self.endpoint, body)
        return read_stream(events, StreamReader(self.endpoint), "message_stop")


# --- request body ------------------------------------------------------------------


def request_body(model: str, options: ModelOptions, request: ModelRequest) -> Json:
    messages = to_messages(request.messages)
    if request.purpose == "compact":
        messages = _merged([*messages, {"role": "user", "content": [_text(COMPACT_INSTRUCTION)]}])
    _mark_tail(messages)
    thinking = options.thinking_budget
    body: Json = {
        "model": model,
        "max_tokens": options.max_tokens or DEFAULT_ANTHROPIC_MAX_TOKENS,
        "messages": messages,
        "stream": True,
    }
    if request.system:
        body["system"] = [{"type": "text", "text": request.system, "cache_control": EPHEMERAL}]
    if request.tools:
        tools: list[Json] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
        tools[-1]["cache_control"] = EPHEMERAL
        body["tools"] = tools
        if request.purpose == "compact":
            body["tool_choice"] = {"type": "none"}
    if thinking is not None and request.purpose == "turn":
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking}
    return body


def to_messages(conversation: tuple[Message, ...]) -> list[Json]:
    """The conversation as API messages: consecutive messages of one role merged, a
    message left with no block dropped."""
    out: list[Json] = []
    for message in conversation:
        blocks = [b for b in map(_block, message.content) if b is not None]
        if blocks:
            out.append({"role": message.role, "content": blocks})
    return _merged(out)


def _merged(messages: list[Json]) -> list[Json]:
    out: list[Json] = []
    for message in messages:
        if out and out[-1]["role"] == message["role"]:
            previous = out[-1]["content"]
            assert isinstance(previous, list) and isinstance(message["content"], list)
            out[-1] = {"role": message["role"], "content": [*previous, *message["content"]]}
        else:
            out.append(message)
    return out


def _text(text: str) -> Json:
    return {"type": "text", "text": text}


def _block(block: Block) -> Json | None:
    match block:
        case TextBlock(text=text):
            return _text(text) if text else None
        case ThinkingBlock(redacted=data) if data:
            return {"type": "redacted_thinking", "data": data}
        case ThinkingBlock(text=text, signature=signature):
            if not signature:
                return None  # not this API's own thinking: it cannot be sent back
            return {"type": "thinking", "thinking": text, "signature": signature}
        case ImageBlock():
            return {"type": "image", "source": image_source(block)}
        case ToolUseBlock(id=id, name=name, input=input):
            return {"type": "tool_use", "id": id, "name": name, "input": input}
        case ToolResultBlock(tool_use_id=id, content=content, is_error=is_error):
            result: Json = {"type": "tool_result", "tool_use_id": id, "content": content}
            if is_error:
                result["is_error"] = True
            return result
    return None


def image_source(image: ImageBlock) -> Json:
    data = image.data
    if data.startswith(("http://", "https://")):
        return {"type": "url", "url": data}
    media_type = image.media_type
    if data.startswith("data:") and ";base64," in data:
        header, _, data = data.partition(";base64,")
        media_type = header[len("data:") :] or media_type
    return {"type": "base64", "media_type": media_type, "data": data}


def _mark_tail(messages: list[Json]) -> None:
    """The conversation-tail cache breakpoint: on the last block that can carry one."""
    if not messages:
        return
    content = messages[-1]["content"]
    assert isinstance(content, list)
    for index in range(len(content) - 1, -1, -1):
        if content[index]["type"] not in ("thinking", "redacted_thinking"):
            content[index] = {**content[index], "cache_control": EPHEMERAL}
            return


# --- response stream ----------------------------------------------------------------


class _Open(msgspec.Struct):
    kind: str
    id: str = ""
    name: str = ""
    parts: list[str] = msgspec.field(default_factory=list)
    signature: str = ""


class StreamReader:
    """Turns one response's SSE events into model events; ``stop`` is set at its end."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._open: dict[int, _Open] = {}
        self._usage: dict[str, int] = {}
        self._reason: StopReason = "end_turn"
        self.stop: Stop | None = None

    def feed(self, sse: SseEvent) -> list[ModelEvent]:
        if sse.event == "ping":
            return []
        try:
            data = msgspec.json.decode(sse.data)
        except ValueError:
            raise Transient(f"a stream event was not JSON: {sse.data[:80]!r}") from None
        kind = data.get("type", sse.event) if isinstance(data, dict) else sse.event
        match kind:
            case "content_block_delta":
                return self._delta(data["index"], data["delta"])
            case "content_block_start":
                return self._start(data["index"], data["content_block"])
            case "content_block_stop":
                return self._block_stop(data["index"])
            case "message_start":
                self._count(data["message"].get("usage"))
            case "message_delta":
                self._count(data.get("usage"))
                reason = data.get("delta", {}).get("stop_reason")
                if reason:
                    self._reason = STOP_REASONS.get(reason, "end_turn")
            case "message_stop":
                self.stop = self._stop()
            case "error":
                raise stream_error(self._endpoint, data)
        return []

    def at_eof(self) -> list[ModelEvent]:
        return []  # a response is whole only at message_stop

    def _start(self, index: int, block: Json) -> list[ModelEvent]:
        kind = str(block.get("type"))
        self._open[index] = _Open(kind, str(block.get("id", "")), str(block.get("name", "")))
        if kind == "text" and block.get("text"):
            return [TextDelta(str(block["text"]))]
        if kind == "thinking" and block.get("thinking"):
            return [ThinkingDelta(str(block["thinking"]))]
        if kind == "redacted_thinking":
            return [ThinkingDelta("", redacted=str(block.get("data", "")))]
        if kind == "tool_use" and block.get("input"):
            self._open[index].parts.append(json.dumps(block["input"]))
        return []

    def _delta(self, index: int, delta: Json) -> list[ModelEvent]:
        match delta.get("type"):
            case "text_delta":
                return [TextDelta(str(delta["text"]))] if delta["text"] else []
            case "thinking_delta":
                return [ThinkingDelta(str(delta["thinking"]))] if delta["thinking"] else []
            case "signature_delta":
                self._open[index].signature += str(delta["signature"])
            case "input_json_delta":
                self._open[index].parts.append(str(delta["partial_json"]))
        return []

    def _block_stop(self, index: int) -> list[ModelEvent]:
        block = self._open.pop(index, None)
        if block is None:
            return []
        if block.kind == "thinking" and block.signature:
            return [ThinkingDelta("", signature=block.signature)]
        if block.kind == "tool_use":
            return [tool_use(block.id, block.name, "".join(block.parts))]
        return []

    def _count(self, usage: object) -> None:
        if isinstance(usage, dict):
            self._usage.update({k: v for k, v in usage.items() if isinstance(v, int)})

    def _stop(self) -> Stop:
        usage = self._usage
        return Stop(
            self._reason,
            input_tokens=usage.get("input_tokens", 0),
            output_tokens=usage.get("output_tokens", 0),
            cache_read_tokens=usage.get("cache_read_input_tokens", 0),
            cache_write_tokens=usage.get("cache_creation_input_tokens", 0),
        )
