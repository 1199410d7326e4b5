"""The model protocol: what a turn asks a model and what streams back.

A model is anything with ``stream(request)`` yielding :data:`ModelEvent` items
and ending with exactly one :class:`Stop`. Real providers and the
:class:`~halo_actors.agent.scripted.ScriptedModel` plug in behind it.

A model classifies its failures, the turn loop decides what follows (see
``docs/design/models.md``): :class:`ModelTimeout` — retry this attempt from
scratch (the partial text is not landed); :class:`ModelRejected` — the request
was refused as malformed (repair, retry once); :class:`ModelContextExceeded` —
the prompt is over the model's context window (compact, retry once);
:class:`ModelFailed` — the turn ends with an error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal, Protocol

import msgspec
import trio

from ..core.conversation import CHARS_PER_TOKEN, Message, message_chars
from ..core.errors import HaloError
from ..core.events import RoundKind
from ..tools.base import ToolSpec

StopReason = Literal["end_turn", "tool_use", "max_tokens"]


class RoundInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The input round the current turn answers (lets scripts pick a response)."""

    text: str
    kind: RoundKind
    resumed_after_interrupt: bool = False


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    agent_id: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    round: RoundInfo
    step: int
    """How many model calls this turn made before this one (0 for the first)."""
    purpose: Literal["turn", "compact"] = "turn"
    """``compact``: summarise ``messages``; the model is to answer with text only, and a
    provider puts :data:`COMPACT_INSTRUCTION` after them as the last user message."""


COMPACT_INSTRUCTION = (
    "Summarise the conversation above for your own later use: the task, what was done "
    "and decided, the files and facts that matter, and what is still open. "
    "Answer with the summary only."
)
"""What a compaction request asks of a model (the runtime's words, placed by a provider)."""


class TextDelta(msgspec.Struct, frozen=True):
    text: str


class ThinkingDelta(msgspec.Struct, frozen=True):
    """Thinking text; ``signature`` (sent once, when a thinking block ends) closes the
    block, which is kept with it in the conversation. ``redacted``: an encrypted block
    (no text) the model's API wants back as it was."""

    text: str
    signature: str = ""
    redacted: str = ""


class ToolUse(msgspec.Struct, frozen=True):
    id: str
    name: str
    input: dict[str, object]
    input_error: str | None = None
    """Set when the model's arguments were not a JSON object (``input`` is then empty):
    the call is answered with this error instead of being run."""


class Stop(msgspec.Struct, frozen=True):
    reason: StopReason
    input_tokens: int = 0
    """Prompt tokens billed at the full rate (not read from or written to a cache)."""
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def context_tokens(self) -> int:
        """The conversation's size after this response, as the model counted it."""
        return (
            self.input_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
            + self.output_tokens
        )


ModelEvent = TextDelta | ThinkingDelta | ToolUse | Stop


class ModelTimeout(HaloError):
    """This attempt timed out; retry it from scratch."""


class ModelRejected(HaloError):
    """The model API refused this request as malformed (a bad conversation, not a
    transient fault); the turn repairs the whole conversation afresh and retries once."""


class ModelContextExceeded(HaloError):
    """The prompt is over the model's context window; the turn compacts the conversation
    and retries once."""


class ModelFailed(HaloError):
    """The model call failed for good; the turn ends with an error."""


class Model(Protocol):
    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response; the last item is a :class:`Stop`."""
        ...


CLOSE_SECONDS = 5.0
"""How long a model stream may take to close after its turn stopped reading it."""


def open_stream(model: Model, request: ModelRequest) -> ModelStream:
    """``model.stream(request)``, closed on exit: an async generator's ``finally`` runs
    now, in this task and under this cancel scope, not later at garbage collection."""
    return ModelStream(model, request)


class ModelStream:
    """What :func:`open_stream` returns (a class, not an ``asynccontextmanager``: one
    generator less per model call)."""

    __slots__ = ("_model", "_request", "_stream")

    def __init__(self, model: Model, request: ModelRequest) -> None:
        self._model = model
        self._request = request
        self._stream: AsyncIterator[ModelEvent] | None = None

    async def __aenter__(self) -> AsyncIterator[ModelEvent]:
        self._stream = self._model.stream(self._request)
        return self._stream

    async def __aexit__(self, *exc: object) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + CLOSE_SECONDS):
                await aclose()


def estimate_tokens(messages: tuple[Message, ...] | list[Message]) -> int:
    """A cheap, deterministic size estimate (about four characters a token). A session's
    state keeps the same figure up to date as it changes (``SessionState.context_chars``)."""
    return sum(map(message_chars, messages)) // CHARS_PER_TOKEN
