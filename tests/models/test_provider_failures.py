"""Every failure the issue lists, injected by the loopback API, for both providers:
what is retried (backoff with full jitter, ``retry-after``, bounded), what is not, and
how each is classified for the turn loop."""

from __future__ import annotations

import pytest
import trio
from provider_kit import ANTHROPIC, BUDGET, FAST, SECRET, Wire, collect, request, serving
from wire_formats import Call, Turn, anthropic_error_event, anthropic_stream, pieces
from wire_server import Reply

from halo_actors.agent.model import (
    ModelContextExceeded,
    ModelFailed,
    ModelRejected,
    ModelTimeout,
    Stop,
    TextDelta,
    ToolUse,
)
from halo_actors.agent.providers import RetryPolicy
from halo_actors.agent.providers.options import ModelConfigError

OK = Turn(text="recovered")


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, "rate_limit_error"),
        (529, "overloaded_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "api_error"),
    ],
)
async def test_transient_statuses_are_retried(wire: Wire, status: int, kind: str) -> None:
    """Rule: 429, 529/overloaded, 500/502/503 → retry with exponential backoff and full
    jitter, bounded in attempts and total time; the retried call answers normally."""
    async with serving(wire) as server:
        server.queue(wire.error(status, kind, "try later"), wire.error(status, kind, "again"))
        server.queue(wire.stream(OK))
        events = await collect(wire.model(server))
    assert len(server.requests) == 3
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "recovered"


async def test_retry_after_is_honoured(wire: Wire) -> None:
    """Rule: honouring ``retry-after`` (seconds; OpenAI also sends ``retry-after-ms``):
    the next attempt waits at least that long."""
    header = ("retry-after", "1") if wire is ANTHROPIC else ("retry-after-ms", "400")
    async with serving(wire) as server:
        server.queue(wire.error(429, "rate_limit_error", "slow down", header))
        server.queue(wire.stream(OK))
        start = trio.current_time()
        await collect(wire.model(server))
    assert len(server.requests) == 2
    assert trio.current_time() - start >= (1.0 if wire is ANTHROPIC else 0.4)


async def test_a_connection_dropped_before_the_first_byte_is_retried(wire: Wire) -> None:
    """Rule: a connection dropped before the first byte → retry."""
    async with serving(wire) as server:
        server.queue(Reply(drop=True), Reply(drop=True), wire.stream(OK))
        events = await collect(wire.model(server))
    assert len(server.requests) == 3 and isinstance(events[-1], Stop)


async def test_a_silent_response_is_a_timeout_and_retried(wire: Wire) -> None:
    """Rule: a stream silent for N seconds (``RetryPolicy.stall``) is a timeout and is
    retried; nothing had streamed yet, so the provider retries it itself."""
    async with serving(wire) as server:
        server.queue(Reply(hold=True), wire.stream(OK))
        events = await collect(wire.model(server, retry=_stall(0.3)))
    assert len(server.requests) == 2
    assert server.requests[0].closed_at is not None  # the silent one was hung up on
    assert isinstance(events[-1], Stop)


async def test_a_stream_silent_after_text_is_a_model_timeout(wire: Wire) -> None:
    """Rule: a failed attempt's partial text never lands: once text has streamed, a stall
    is a ``ModelTimeout`` (the turn retries from scratch, landing nothing)."""
    body = wire.stream(Turn(text="partial answer that never ends")).chunks
    async with serving(wire) as server:
        server.queue(Reply(chunks=body[: len(body) // 2], hold=True))
        events = []
        with pytest.raises(ModelTimeout), trio.fail_after(BUDGET):
            async for event in wire.model(server, retry=_stall(0.3)).stream(request()):
                events.append(event)
    assert any(isinstance(e, TextDelta) for e in events)
    assert len(server.requests) == 1


async def test_attempts_are_bounded(wire: Wire) -> None:
    """Rule: retries are bounded in attempts: the last failure is the error."""
    async with serving(wire) as server:
        server.queue(*[wire.error(503, "api_error", f"down {i}") for i in range(10)])
        with pytest.raises(ModelFailed, match=r"gave up after 4 attempts.*down 3"):
            await collect(wire.model(server))
    assert len(server.requests) == FAST.attempts


async def test_total_retry_time_is_bounded(wire: Wire) -> None:
    """Rule: retries are bounded in total time: a wait past the budget is not waited."""
    policy = RetryPolicy(attempts=10, base_delay=0.01, total=2.0, stall=1.0)
    async with serving(wire) as server:
        server.queue(wire.error(429, "rate_limit_error", "quota", ("retry-after", "60")))
        start = trio.current_time()
        with pytest.raises(ModelFailed, match="retry budget"):
            await collect(wire.model(server, retry=policy))
    assert len(server.requests) == 1 and trio.current_time() - start < 30


async def test_an_invalid_request_is_model_rejected(wire: Wire) -> None:
    """Rule: 400 invalid request → ``ModelRejected`` (the turn repairs and retries once)."""
    async with serving(wire) as server:
        server.queue(wire.error(400, "invalid_request_error", "messages.1: bad block"))
        with pytest.raises(ModelRejected, match="bad block"):
            await collect(wire.model(server))
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 212345 tokens > 200000 maximum",
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
    ],
)
async def test_a_prompt_over_the_window_is_context_exceeded(wire: Wire, message: str) -> None:
    """Rule: 400 "prompt too long" / context exceeded → compact, then retry once (the
    provider classifies it as ``ModelContextExceeded``)."""
    async with serving(wire) as server:
        server.queue(wire.error(400, "invalid_request_error", message))
        with pytest.raises(ModelContextExceeded):
            await collect(wire.model(server))
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_names_its_variable_and_is_not_retried(wire: Wire, status: int) -> None:
    """Rule: 401/403 → an error that names the key variable; no retry; never the key."""
    async with serving(wire) as server:
        echo = f"invalid x-api-key: {SECRET}"
        server.queue(wire.error(status, "authentication_error", echo))
        with pytest.raises(ModelFailed) as caught:
            await collect(wire.model(server))
    assert wire.key_env in str(caught.value)
    assert SECRET not in str(caught.value) and "[redacted]" in str(caught.value)
    assert len(server.requests) == 1


async def test_malformed_call_arguments_become_an_input_error(wire: Wire) -> None:
    """Rule: malformed tool-call JSON → that call carries an error (the turn answers it
    with a result the model can read); the other calls of the batch are intact."""
    calls = [Call("call_1", "shell_exec", {}), Call("call_2", "shell_exec", {"command": "ls"})]
    turn = Turn(calls=calls, raw_arguments={"call_1": '{"command": "ls'})
    async with serving(wire) as server:
        server.queue(wire.stream(turn))
        events = await collect(wire.model(server))
    uses = [e for e in events if isinstance(e, ToolUse)]
    assert uses[0].input_error is not None and "not valid JSON" in uses[0].input_error
    assert uses[1].input == {"command": "ls"} and uses[1].input_error is None


async def test_an_overloaded_error_event_before_content_is_retried() -> None:
    """An ``error`` event inside a 200 stream (Anthropic's documented mid-stream
    overload) is classified like its status: before any content, it is retried."""
    head = anthropic_stream(Turn(text="x")).split(b"event: content_block_start")[0]
    async with serving(ANTHROPIC) as server:
        failed = head + anthropic_error_event("overloaded_error", "Overloaded")
        server.queue(Reply(chunks=pieces(failed)), ANTHROPIC.stream(OK))
        events = await collect(ANTHROPIC.model(server))
    assert len(server.requests) == 2 and isinstance(events[-1], Stop)


async def test_a_missing_key_for_the_official_host_is_a_startup_error(wire: Wire) -> None:
    """Rule: a missing key for a host that needs one is a clear startup error naming the
    variable (a local server needs none)."""
    from halo_actors.agent.providers import build_model

    with pytest.raises(ModelConfigError, match=wire.key_env):
        build_model(f"{wire.name}:some-model", env={})
    local = build_model(f"{wire.name}:some-model", env={wire.base_env: "http://127.0.0.1:9/v1"})
    assert local.endpoint.key == ""


def _stall(seconds: float) -> RetryPolicy:
    return RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02, total=20.0, stall=seconds)
