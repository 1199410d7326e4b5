"""The turn loop: model call → tool batch → … until the model ends its turn.

One turn answers one input round. Between a finished batch and the next model
call sits the **batch-boundary hook** (soft interrupts, mid-turn compaction);
it is never consulted before the first batch. See ``docs/design/turns.md``.

Invariants (each is what a cut turn leaves behind):
- a hard abort (cancellation of the caller's scope) while text streams lands
  the streamed text as one assistant block ending with ``STREAM_CUT_MARKER``; a
  model timeout is retried from scratch and lands nothing;
- every tool call of a batch gets exactly one logged result: its own when it
  finished, else (in a ``finally``) the do-not-retry marker for a call that had
  started and the not-run result for one that had not; a person sees the same fact
  (``[interrupted by user]`` / ``[not run — interrupted]``), never a position;
- cleanup after an abort goes through the host's ``land``: never cancelled, and
  time-bounded where the host's appends can wait;
- no request goes out while the conversation is over the context window: the turn
  makes room first (a compaction), and ends with an error if it cannot; a prompt the
  model finds too long is compacted and retried once;
- a call whose arguments the model garbled is answered with an error it can read,
  and not run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import msgspec
import trio

from ..core.conversation import (
    CHARS_PER_TOKEN,
    Block,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    message_chars,
)
from ..core.events import (
    AssistantReplied,
    ContextMeasured,
    ErrorRaised,
    Event,
    Notified,
    TextStreamed,
    ThinkingStreamed,
    ToolCalled,
    ToolReturned,
    UsageReported,
)
from ..core.state import LANDED
from ..tools.base import Tool, ToolContext, ToolOutput, ToolSpec, call_tool
from .model import (
    Model,
    ModelContextExceeded,
    ModelFailed,
    ModelRejected,
    ModelRequest,
    ModelTimeout,
    RoundInfo,
    Stop,
    TextDelta,
    ThinkingDelta,
    ToolUse,
    open_stream,
)
from .repair import (
    INTERRUPTED_RESULT,
    NOT_RUN_RESULT,
    STREAM_CUT_MARKER,
    UI_INTERRUPTED,
    UI_NOT_RUN,
)

RESEND = "Call the tool again with its arguments as one JSON object."
"""Ends the result of a call whose arguments were not a JSON object."""

CLEANUP_SECONDS = 5.0
"""Upper bound for shielded cleanup after an abort."""


class TurnHost(Protocol):
    """The session actor, as the turn loop sees it."""

    session_id: str
    agent_id: str

    async def emit(self, *events: Event) -> None:
        """Append to the log and apply to the session state (atomic under cancellation)."""
        ...

    async def land(self, *events: Event) -> None:
        """:meth:`emit` what a cut turn leaves behind (cut results, streamed text), in a
        task whose turn is cancelled: never raises ``Cancelled``, and bounded by
        ``CLEANUP_SECONDS`` where the host's appends can wait."""
        ...

    def model_messages(self, *, afresh: bool = False) -> tuple[Message, ...]:
        """The conversation as a model sees it: repaired (every call has one result).
        ``afresh``: repair the whole history again, trusting nothing cached."""
        ...

    def model_chars(self, messages: tuple[Message, ...]) -> int:
        """The size of ``messages`` in a model request (``message_chars`` summed, what
        ``estimate_tokens`` counts); O(1) for the tuple ``model_messages`` returned last."""
        ...

    async def at_batch_boundary(self) -> bool:
        """Called after every batch; True means: end the turn here (soft interrupt)."""
        ...


class TurnSetup(msgspec.Struct, frozen=True, kw_only=True):
    """What one turn runs with (made per turn: a Struct, built in C)."""

    model: Model
    tools: Mapping[str, Tool]
    specs: tuple[ToolSpec, ...]
    """What the model is told about ``tools`` (built once per tool set, not per call)."""
    tool_context: ToolContext
    system: str = ""
    max_steps: int = 50
    model_retries: int = 2
    max_parallel_tools: int = 8
    context_window: int = 0
    """The model's context size in tokens (0: not enforced)."""
    context_tokens: Callable[[], int] | None = None
    """The conversation's size now (the last measured usage plus what was added since)."""
    make_room: Callable[[], Awaitable[bool]] | None = None
    """Compact the conversation (only called with no tool call open); False if it could not."""


class _Reply(msgspec.Struct):
    text: str
    thinking: list[ThinkingBlock]
    uses: list[ToolUse]
    stop: Stop


async def run_turn(host: TurnHost, setup: TurnSetup, round: RoundInfo) -> str:
    """Run one turn; returns the stop reason (``end_turn``, ``interrupted``, ``error``, …)."""
    for step in range(setup.max_steps):
        # A cut turn makes no further model call, even when nothing since the cut has
        # checkpointed (pipelined appends do not; a shielded compaction hid the cut).
        await trio.lowlevel.checkpoint_if_cancelled()
        if not await _fits(setup):
            await host.emit(ErrorRaised(error=_over_window(setup)))
            return "error"
        request = ModelRequest(
            session_id=host.session_id,
            agent_id=host.agent_id,
            system=setup.system,
            messages=host.model_messages(),
            tools=setup.specs,
            round=round,
            step=step,
        )
        try:
            reply = await _call_model(host, setup, request)
        except ModelFailed as exc:
            await host.emit(ErrorRaised(error=f"model error: {exc}"))
            return "error"
        await _log_reply(host, setup, request, reply)
        if not reply.uses:
            return reply.stop.reason
        if reply.stop.reason == "max_tokens":
            await _answer_not_run(host, reply.uses)
            return "max_tokens"
        await run_batch(host, setup, reply.uses)
        if await host.at_batch_boundary():
            return "interrupted"
    await host.emit(ErrorRaised(error=f"the turn made {setup.max_steps} model calls; stopped"))
    return "error"


async def _fits(setup: TurnSetup) -> bool:
    """Under the context window, after making room if needed (before a model call, where
    no tool call is open)."""
    if not setup.context_window or setup.context_tokens is None:
        return True
    if setup.context_tokens() <= setup.context_window:
        return True
    if setup.make_room is not None:
        await setup.make_room()
    return setup.context_tokens() <= setup.context_window


def _over_window(setup: TurnSetup) -> str:
    size = setup.context_tokens() if setup.context_tokens is not None else 0
    return (
        f"the conversation ({size} tokens) is over the context window "
        f"({setup.context_window}) and compaction could not make room"
    )


async def _call_model(host: TurnHost, setup: TurnSetup, request: ModelRequest) -> _Reply:
    """Timeouts are retried as they are; a request refused as malformed is retried once
    with the whole conversation repaired afresh (the repair cache is not trusted); a
    prompt over the model's context window is retried once after a compaction."""
    repaired = compacted = False
    for attempt in range(setup.model_retries + 1):
        try:
            return await _stream_once(host, setup, request)
        except ModelTimeout as exc:
            await host.emit(Notified(text=f"model timed out ({exc}); retry {attempt + 1}"))
        except ModelContextExceeded as exc:
            if compacted or setup.make_room is None:
                raise ModelFailed(f"the prompt is over the context window: {exc}") from None
            compacted = True
            await host.emit(Notified(text=f"the prompt is too long ({exc}); compacting"))
            if not await setup.make_room():
                raise ModelFailed(f"the prompt is over the context window: {exc}") from None
            request = msgspec.structs.replace(request, messages=host.model_messages())
        except ModelRejected as exc:
            if repaired:
                raise ModelFailed(f"refused again after a full repair: {exc}") from None
            repaired = True
            await host.emit(Notified(text=f"model refused the request ({exc}); repairing"))
            request = msgspec.structs.replace(request, messages=host.model_messages(afresh=True))
    raise ModelFailed(f"timed out {setup.model_retries + 1} times")


async def _stream_once(host: TurnHost, setup: TurnSetup, request: ModelRequest) -> _Reply:
    text: list[str] = []
    thinking = _Thinking()
    uses: list[ToolUse] = []
    try:
        async with open_stream(setup.model, request) as stream:
            async for item in stream:
                match item:
                    case TextDelta(delta):
                        await host.emit(TextStreamed(text=delta))
                        text.append(delta)
                    case ThinkingDelta(delta):
                        if delta:
                            await host.emit(ThinkingStreamed(text=delta))
                        thinking.add(item)
                    case ToolUse():
                        uses.append(item)
                    case Stop():
                        return _Reply("".join(text), thinking.blocks(), uses, item)
    except trio.Cancelled:
        if text:
            landed = TextBlock(text="".join(text) + "\n\n" + STREAM_CUT_MARKER)
            await host.land(AssistantReplied(content=(landed,), stop_reason=LANDED))
        raise
    raise ModelFailed("the model stream ended without a stop reason")


class _Thinking:
    """A response's thinking blocks: a signature (or a redacted block) closes one."""

    def __init__(self) -> None:
        self._done: list[ThinkingBlock] = []
        self._text: list[str] = []

    def add(self, delta: ThinkingDelta) -> None:
        if delta.redacted:
            self._done.append(ThinkingBlock(text="", redacted=delta.redacted))
            return
        self._text.append(delta.text)
        if delta.signature:
            self._done.append(ThinkingBlock(text="".join(self._text), signature=delta.signature))
            self._text = []

    def blocks(self) -> list[ThinkingBlock]:
        rest = "".join(self._text)
        return [*self._done, ThinkingBlock(text=rest)] if rest else list(self._done)


async def _log_reply(
    host: TurnHost, setup: TurnSetup, request: ModelRequest, reply: _Reply
) -> None:
    blocks: list[Block] = list(reply.thinking)
    if reply.text:
        blocks.append(TextBlock(text=reply.text))
    blocks.extend(ToolUseBlock(id=u.id, name=u.name, input=u.input) for u in reply.uses)
    calls = [ToolCalled(tool_name=u.name, tool_use_id=u.id, tool_input=u.input) for u in reply.uses]
    stop = reply.stop
    usage = UsageReported(
        input_tokens=stop.input_tokens,
        output_tokens=stop.output_tokens,
        cache_read_tokens=stop.cache_read_tokens,
        cache_write_tokens=stop.cache_write_tokens,
    )
    replied = AssistantReplied(content=tuple(blocks), stop_reason=stop.reason)
    await host.emit(replied, *calls, usage, _measure(host, setup, request, replied, stop))


def _measure(
    host: TurnHost,
    setup: TurnSetup,
    request: ModelRequest,
    replied: AssistantReplied,
    stop: Stop,
) -> ContextMeasured:
    """The context after this response: the model's own count when it reported usage,
    else the estimate of the request plus the reply (``estimate_tokens`` of both, from
    the request's size the host keeps: O(1) in the conversation's length)."""
    if stop.context_tokens:
        return ContextMeasured(tokens=stop.context_tokens, max_tokens=setup.context_window)
    reply = Message(role="assistant", content=replied.content)
    chars = host.model_chars(request.messages) + message_chars(reply)
    return ContextMeasured(
        tokens=chars // CHARS_PER_TOKEN, max_tokens=setup.context_window, estimated=True
    )


async def _answer_not_run(host: TurnHost, uses: list[ToolUse]) -> None:
    await host.emit(
        *[
            ToolReturned(tool_name=u.name, tool_use_id=u.id, result=NOT_RUN_RESULT, is_error=True)
            for u in uses
        ]
    )


async def run_batch(host: TurnHost, setup: TurnSetup, uses: list[ToolUse]) -> None:
    """Run one batch in parallel; land every result, even when the batch is cut."""
    started: set[str] = set()
    landed: set[str] = set()
    limit = setup.max_parallel_tools

    async def call_one(use: ToolUse) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()  # a cut turn starts no call
        started.add(use.id)
        if use.input_error is not None:
            out = ToolOutput(f"{use.input_error}; nothing was run. {RESEND}", True)
        else:
            out = await call_tool(setup.tools, setup.tool_context, use.name, use.input)
        await host.emit(
            ToolReturned(
                tool_name=use.name, tool_use_id=use.id, result=out.text, is_error=out.is_error
            )
        )
        landed.add(use.id)

    # A batch within the limit needs no limiter (nor its two checkpoints per call).
    limiter = trio.CapacityLimiter(limit) if len(uses) > limit else None

    async def run_one(use: ToolUse) -> None:
        assert limiter is not None
        async with limiter:
            await call_one(use)

    try:
        if len(uses) == 1:  # a batch of one runs in the turn's task: no nursery, no task
            await call_one(uses[0])
        else:
            async with trio.open_nursery() as nursery:
                for use in uses:
                    nursery.start_soon(call_one if limiter is None else run_one, use)
    finally:
        cut = [u for u in uses if u.id not in landed]
        if cut:
            await host.land(*_cut_results(cut, started))


def _cut_results(cut: list[ToolUse], started: set[str]) -> list[Event]:
    """Results for the calls a hard abort cut, marked for the model and for a person by
    the same fact: whether the call had started (never by its place in the batch)."""
    return [
        ToolReturned(
            tool_name=use.name,
            tool_use_id=use.id,
            result=INTERRUPTED_RESULT if use.id in started else NOT_RUN_RESULT,
            is_error=True,
            ui_result=UI_INTERRUPTED if use.id in started else UI_NOT_RUN,
        )
        for use in cut
    ]
