"""Providers driven by the real runtime (``open_runtime`` with a provider object) against
the loopback APIs: tool loops, interrupts, and the failures the turn loop answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from provider_kit import (
    ANTHROPIC,
    BUDGET,
    SECRET,
    Wire,
    is_compaction,
    reply_text,
    results_in,
    serving,
    tool_loop,
)
from wire_formats import Call, Turn
from wire_server import Reply, Seen, WireServer

from halo_actors import open_runtime
from halo_actors.agent.providers import RetryPolicy
from halo_actors.core.events import (
    AssistantReplied,
    Compacted,
    ContextMeasured,
    ErrorRaised,
    Event,
    Notified,
    TextStreamed,
    ToolCalled,
    ToolReturned,
    UsageReported,
)
from halo_actors.core.log import EventFilter
from halo_actors.runtime.profiles import AgentProfile, Limits, Profiles
from halo_actors.runtime.supervisor import Supervisor

PATIENT = RetryPolicy(attempts=2, base_delay=0.01, total=60.0, stall=60.0)
"""No stall timeout can fire during a test (the cut must be the interrupt's)."""


@asynccontextmanager
async def runtime(
    tmp_path: Path,
    wire: Wire,
    server: WireServer,
    *,
    limits: Limits | None = None,
    retry: RetryPolicy | None = None,
) -> AsyncIterator[Supervisor]:
    profiles = Profiles({"default": AgentProfile(name="default", limits=limits or Limits())})
    model = wire.model(server, retry=retry) if retry else wire.model(server)
    async with open_runtime(tmp_path / "ws", model=model, profiles=profiles) as sup:
        try:
            yield sup
        finally:
            await model.aclose()


async def events_of(sup: Supervisor, sid: str) -> list[Event]:
    return [r.event for r in await sup.log.read(EventFilter(session_id=sid))]


async def test_a_tool_using_turn_runs_through_the_runtime(tmp_path: Path, wire: Wire) -> None:
    """Rule: a tool-using conversation (model → shell_exec → result → answer), request
    bodies valid for the SDK types; thinking signatures kept in the conversation; usage
    and the measured context in the log."""
    async with serving(wire, tool_loop(wire)) as server, runtime(tmp_path, wire, server) as sup:
        with trio.fail_after(BUDGET):
            sid = await sup.create_session()
            await sup.send(sid, "run the command")
            await sup.wait_idle(sid)
        events = await events_of(sup, sid)
    assert server.problems == []
    assert len(server.requests) == 2
    assert [r.splitlines()[0] for r in results_in(server.requests[1])] == ["from-shell"]
    replies = [e for e in events if isinstance(e, AssistantReplied)]
    assert reply_text(replies[-1]) == "The command said: from-shell"
    assert any(isinstance(e, ToolReturned) and e.result.startswith("from-shell\n") for e in events)
    if wire is ANTHROPIC:
        sent = server.bodies[1]["messages"][1]["content"][0]  # type: ignore[index]
        assert sent == {"type": "thinking", "thinking": "plan", "signature": "sig-9"}
    usage = [e for e in events if isinstance(e, UsageReported)]
    assert [(u.input_tokens, u.output_tokens, u.cache_read_tokens) for u in usage] == [
        (120, 30, 0),
        (120, 30, 80),
    ]
    measured = [e for e in events if isinstance(e, ContextMeasured)]
    assert [(m.tokens, m.estimated) for m in measured] == [(150, False), (230, False)]


@pytest.mark.parametrize("how", ["interrupt", "stop"])
async def test_a_hard_interrupt_or_stop_closes_the_provider_stream_at_once(
    tmp_path: Path, wire: Wire, how: str
) -> None:
    """Rule: a hard interrupt or stop closes the provider's HTTP stream at once (the
    server sees its connection closed), and the streamed text lands with the cut marker."""
    body = wire.stream(Turn(text="a long answer " * 40), size=40).chunks
    async with serving(wire) as server, runtime(tmp_path, wire, server, retry=PATIENT) as sup:
        server.queue(Reply(chunks=body[: len(body) // 2], hold=True))
        server.queue(wire.stream(Turn(text="stopped")))
        with trio.fail_after(BUDGET):
            sid = await sup.create_session()
            await sup.send(sid, "talk")
            async with sup.log.subscribe(EventFilter(session_id=sid)) as records:
                async for record in records:
                    if isinstance(record.event, TextStreamed):
                        break
            if how == "interrupt":
                await sup.interrupt(sid, "stop talking")
            else:
                await sup.stop(sid)
            await server.requests[0].closed.wait()
            await sup.wait_idle(sid)
        events = await events_of(sup, sid)
    cut = [e for e in events if isinstance(e, AssistantReplied) and e.stop_reason == "interrupted"]
    assert len(cut) == 1 and "reply interrupted by the user" in str(cut[0].content)
    assert server.problems == []


async def test_malformed_call_arguments_get_an_error_result_and_the_turn_goes_on(
    tmp_path: Path, wire: Wire
) -> None:
    """Rule: malformed tool-call JSON → that call gets an error result the model can read;
    the turn goes on."""

    def answer(seen: Seen) -> Reply:
        if not results_in(seen):
            turn = Turn(
                calls=[Call("call_1", "shell_exec", {})],
                raw_arguments={"call_1": '{"command": "ec'},
            )
            return wire.stream(turn)
        return wire.stream(Turn(text="I will fix my arguments."))

    async with serving(wire, answer) as server, runtime(tmp_path, wire, server) as sup:
        with trio.fail_after(BUDGET):
            sid = await sup.create_session()
            await sup.send(sid, "go")
            await sup.wait_idle(sid)
        events = await events_of(sup, sid)
    result = next(e for e in events if isinstance(e, ToolReturned))
    assert (
        result.is_error and "not valid JSON" in result.result and "nothing was run" in result.result
    )
    assert "not valid JSON" in results_in(server.requests[1])[0]
    assert not any(isinstance(e, ErrorRaised) for e in events)
    assert server.problems == []


async def test_a_prompt_too_long_is_compacted_then_retried_once(tmp_path: Path, wire: Wire) -> None:
    """Rule: 400 "prompt too long" → compact, then retry once; a second refusal ends the
    turn with an error."""
    too_long = wire.error(
        400, "invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum"
    )
    script = [wire.stream(Turn(text="first answer")), too_long]
    script += [wire.stream(Turn(text="summary of it")), wire.stream(Turn(text="second answer"))]
    async with serving(wire) as server, runtime(tmp_path, wire, server) as sup:
        server.queue(*script)
        with trio.fail_after(BUDGET):
            sid = await sup.create_session()
            await sup.send(sid, "one")
            await sup.wait_idle(sid)
            await sup.send(sid, "two")
            await sup.wait_idle(sid)
            server.queue(too_long, wire.stream(Turn(text="summary again")), too_long)
            await sup.send(sid, "three")
            await sup.wait_idle(sid)
        events = await events_of(sup, sid)
    assert is_compaction(server.requests[2]) and not is_compaction(server.requests[3])
    texts = [reply_text(e) for e in events if isinstance(e, AssistantReplied)]
    assert texts == ["first answer", "second answer"]
    assert len([e for e in events if isinstance(e, Compacted)]) == 2
    errors = [e.error for e in events if isinstance(e, ErrorRaised)]
    assert len(errors) == 1 and "over the context window" in errors[0]
    assert server.problems == []


async def test_a_failed_attempts_partial_text_never_lands(tmp_path: Path, wire: Wire) -> None:
    """Rule: a failed attempt's partial text never lands (the stream went silent after some
    text: the turn retries from scratch and keeps only the retry's text)."""
    half = wire.stream(Turn(text="half of a reply that stalls"), size=30).chunks
    retry = RetryPolicy(attempts=2, base_delay=0.01, total=20.0, stall=0.3)
    async with serving(wire) as server, runtime(tmp_path, wire, server, retry=retry) as sup:
        server.queue(
            Reply(chunks=half[: len(half) // 2], hold=True), wire.stream(Turn(text="whole reply"))
        )
        with trio.fail_after(BUDGET):
            sid = await sup.create_session()
            await sup.send(sid, "hi")
            await sup.wait_idle(sid)
        events = await events_of(sup, sid)
    replies = [e for e in events if isinstance(e, AssistantReplied)]
    assert [reply_text(r) for r in replies] == ["whole reply"]
    assert any(isinstance(e, Notified) and "timed out" in e.text for e in events)


async def test_a_rejected_request_is_repaired_and_retried_once(tmp_path: Path, wire: Wire) -> None:
    """Rule: 400 invalid request → ModelRejected: repair, retry once (the existing path)."""
    async with serving(wire) as server, runtime(tmp_path, wire, server) as sup:
        server.queue(
            wire.error(400, "invalid_request_error", "messages: bad"),
            wire.stream(Turn(text="fine")),
        )
        with trio.fail_after(BUDGET):
            sid = await sup.create_session()
            await sup.send(sid, "hi")
            await sup.wait_idle(sid)
        events = await events_of(sup, sid)
    assert any(isinstance(e, Notified) and "repairing" in e.text for e in events)
    assert [reply_text(e) for e in events if isinstance(e, AssistantReplied)] == ["fine"]


async def test_real_usage_drives_compaction(tmp_path: Path, wire: Wire) -> None:
    """Rule: real usage drives ``compress_at``: the model's count (here far above the
    character estimate) decides when the conversation is compacted."""
    big = Turn(text="short", input_tokens=5000, output_tokens=10)
    async with serving(wire) as server:
        limits = Limits(compress_at=4000, max_tokens=100_000)
        async with runtime(tmp_path, wire, server, limits=limits) as sup:
            server.queue(wire.stream(big), wire.stream(big), wire.stream(Turn(text="summary")))
            with trio.fail_after(BUDGET):
                sid = await sup.create_session()
                await sup.send(sid, "one")
                await sup.wait_idle(sid)
                assert sup.state(sid).estimated_tokens < 100
                await sup.send(sid, "two")
                await sup.wait_idle(sid)
            events = await events_of(sup, sid)
    assert (
        len([e for e in events if isinstance(e, Compacted)]) == 1
    )  # the first turn had nothing to compact
    assert is_compaction(server.requests[2])
    assert sup.state(sid).measured_tokens is None


async def test_the_key_never_appears_in_the_log_errors_or_output(
    tmp_path: Path, wire: Wire, capfd: object
) -> None:
    """Rule: keys never appear in a log, the event log, an error message or a frame."""
    echo = f"bad key {SECRET}"
    async with serving(wire) as server:
        server.queue(
            wire.error(500, "api_error", echo), wire.error(401, "authentication_error", echo)
        )
        server.queue(
            wire.error(400, "invalid_request_error", echo),
            wire.error(400, "invalid_request_error", echo),
        )
        profiles = Profiles({"default": AgentProfile(name="default")})
        model = wire.model(server)
        async with open_runtime(tmp_path / "ws", model=model, profiles=profiles) as sup:
            with trio.fail_after(BUDGET):
                sid = await sup.create_session()
                await sup.send(sid, "one")
                await sup.wait_idle(sid)
                await sup.send(sid, "two")
                await sup.wait_idle(sid)
                events = await events_of(sup, sid)
        await model.aclose()
    errors = [e.error for e in events if isinstance(e, ErrorRaised)]
    assert len(errors) == 2 and wire.key_env in errors[0]
    stored = b"".join(p.read_bytes() for p in (tmp_path / "ws" / ".halo").iterdir() if p.is_file())
    assert stored and SECRET.encode() not in stored
    assert "[redacted]" in " ".join(errors) + str(events)
    out, err = capfd.readouterr()  # type: ignore[attr-defined]
    assert SECRET not in out + err and SECRET not in repr(model) and SECRET not in str(events)


async def test_a_batch_cut_by_a_hard_interrupt_still_sends_a_valid_conversation(
    tmp_path: Path, wire: Wire
) -> None:
    """After a hard interrupt cuts a running parallel batch, the next request still pairs
    every call with its result (the cut markers): the loopback API's conversation check
    would refuse it otherwise."""
    calls = [
        Call("call_a", "shell_exec", {"command": "sleep 10"}),
        Call("call_b", "shell_exec", {"command": "sleep 10"}),
    ]

    def answer(seen: Seen) -> Reply:
        if "never mind" in json.dumps(seen.body):
            return wire.stream(Turn(text="ok, stopped"))
        return wire.stream(Turn(calls=calls))

    async with serving(wire, answer) as server, runtime(tmp_path, wire, server) as sup:
        with trio.fail_after(BUDGET):
            sid = await sup.create_session()
            async with sup.log.subscribe(EventFilter(session_id=sid)) as records:
                await sup.send(sid, "sleep twice")
                seen = 0
                async for record in records:
                    seen += isinstance(record.event, ToolCalled)
                    if seen == 2:
                        break
            await sup.interrupt(sid, "never mind")
            await sup.wait_idle(sid)
    assert len(server.requests) == 2
    assert (
        sorted(set(results_in(server.requests[1]))) != []
        and len(results_in(server.requests[1])) == 2
    )
