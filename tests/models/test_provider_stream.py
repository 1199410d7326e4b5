"""Both providers against a loopback server speaking their API's SSE byte for byte:
what streams back, and what each request body says (checked against the SDK types)."""

from __future__ import annotations

import pytest
from provider_kit import ANTHROPIC, OPENAI, SECRET, Wire, collect, request, serving
from wire_formats import Call, Turn, openai_stream, pieces
from wire_server import Reply

from halo_actors.agent.model import Stop, TextDelta, ThinkingDelta, ToolUse
from halo_actors.agent.providers.options import ModelOptions
from halo_actors.core.conversation import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    user_text,
)

TEXT = "Héllo wörld — ✓ 日本語 🎉 done"
"""Multi-byte characters everywhere, so 5-byte writes split some of them."""


async def test_text_thinking_and_a_parallel_batch_stream_back_whole(wire: Wire) -> None:
    """Rule: text deltas, thinking, tool calls assembled from fragments, the stop reason
    and usage; a parallel batch of calls comes back as one batch; UTF-8 split across
    chunks is handled."""
    calls = [
        Call("call_1", "shell_exec", {"command": "echo ünï ✓"}),
        Call("call_2", "shell_exec", {"command": "ls -la /tmp"}),
    ]
    turn = Turn(text=TEXT, thinking="Let me think — ähm.", signature="sig-ABC", calls=calls)
    async with serving(wire) as server:
        server.queue(wire.stream(turn, size=5))
        events = await collect(wire.model(server))
    assert server.problems == []
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == TEXT
    assert len([e for e in events if isinstance(e, TextDelta)]) > 3
    thinking = [e for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(e.text for e in thinking) == "Let me think — ähm."
    if wire is ANTHROPIC:
        assert thinking[-1].signature == "sig-ABC"
    uses = [e for e in events if isinstance(e, ToolUse)]
    assert [(u.id, u.input) for u in uses] == [(c.id, c.input) for c in calls]
    stop = events[-1]
    assert isinstance(stop, Stop) and stop.reason == "tool_use"
    assert (stop.input_tokens, stop.output_tokens) == (120, 30)
    assert all(not isinstance(e, Stop) for e in events[:-1])


@pytest.mark.parametrize(
    ("anthropic_reason", "openai_reason", "expected"),
    [
        ("end_turn", "stop", "end_turn"),
        ("max_tokens", "length", "max_tokens"),
        ("stop_sequence", "content_filter", "end_turn"),
    ],
)
async def test_stop_reasons_are_mapped(
    wire: Wire, anthropic_reason: str, openai_reason: str, expected: str
) -> None:
    """Rule: stop reasons mapped (``end_turn``/``stop``, ``tool_use``/``tool_calls``,
    ``max_tokens``/``length``)."""
    reason = anthropic_reason if wire is ANTHROPIC else openai_reason
    async with serving(wire) as server:
        server.queue(wire.stream(Turn(text="ok", stop=reason)))
        events = await collect(wire.model(server))
    assert events[-1] == Stop(expected, input_tokens=120, output_tokens=30)  # type: ignore[arg-type]


async def test_usage_counts_cache_reads_and_writes(wire: Wire) -> None:
    """Rule: usage (input, output, cache read/write tokens) per response."""
    async with serving(wire) as server:
        server.queue(
            wire.stream(Turn(text="ok", cache_read=900, cache_write=0 if wire is OPENAI else 50))
        )
        stop = (await collect(wire.model(server)))[-1]
    assert isinstance(stop, Stop)
    assert (stop.input_tokens, stop.cache_read_tokens) == (120, 900)
    assert stop.cache_write_tokens == (50 if wire is ANTHROPIC else 0)
    assert stop.context_tokens == 120 + 900 + stop.cache_write_tokens + 30


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_from_compatible_servers_is_thinking(field: str) -> None:
    """Rule: ``reasoning_content`` from compatible servers streams as thinking."""
    async with serving(OPENAI) as server:
        body = openai_stream(Turn(thinking="step one, step two", text="42"), reasoning_field=field)
        server.queue(Reply(chunks=pieces(body, 11)))
        events = await collect(OPENAI.model(server))
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "step one, step two"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "42"


async def test_a_stream_without_done_but_with_a_finish_reason_is_whole() -> None:
    """Some compatible servers end the body after the last chunk with no ``[DONE]``."""
    async with serving(OPENAI) as server:
        server.queue(Reply(chunks=pieces(openai_stream(Turn(text="fine"), done=False))))
        events = await collect(OPENAI.model(server))
    assert events[-1] == Stop("end_turn", input_tokens=120, output_tokens=30)


# --- request bodies -----------------------------------------------------------------

LOOP = (
    user_text("list the files"),
    Message(
        role="assistant",
        content=(
            ThinkingBlock(text="I should run ls.", signature="sig-1"),
            TextBlock(text="Looking."),
            ToolUseBlock(id="call_1", name="shell_exec", input={"command": "ls"}),
            ToolUseBlock(id="call_2", name="shell_exec", input={"command": "pwd"}),
        ),
    ),
    Message(
        role="user",
        content=(
            ToolResultBlock(tool_use_id="call_1", content="a.txt\nb.txt"),
            ToolResultBlock(tool_use_id="call_2", content="boom", is_error=True),
        ),
    ),
    Message(
        role="assistant", content=(ThinkingBlock(text="unsigned"), TextBlock(text="Two files."))
    ),
    Message(
        role="user",
        content=(TextBlock(text="and this?"), ImageBlock(data="aGVsbG8=", media_type="image/png")),
    ),
)


async def test_anthropic_body_keeps_signatures_and_marks_three_cache_breakpoints() -> None:
    """Rule: prompt caching breakpoints on the system prompt, the tools and the conversation
    tail; thinking blocks go back with their signatures (an unsigned one is left out); the
    body is valid for the SDK's ``MessageCreateParamsStreaming``."""
    async with serving(ANTHROPIC) as server:
        server.queue(ANTHROPIC.stream(Turn(text="ok")))
        await collect(
            ANTHROPIC.model(server, options=ModelOptions(max_tokens=1000, temperature=0.5)),
            request(*LOOP),
        )
    assert server.problems == []
    seen = server.requests[0]
    assert (seen.method, seen.path) == ("POST", "/v1/messages")
    assert seen.headers["x-api-key"] == SECRET and seen.headers["anthropic-version"] == "2023-06-01"
    body = server.bodies[0]
    assert body["stream"] is True and body["max_tokens"] == 1000 and "temperature" not in body
    assert body["system"] == [
        {"type": "text", "text": "You are a test agent.", "cache_control": {"type": "ephemeral"}}
    ]
    tools = body["tools"]
    assert isinstance(tools, list) and tools[-1]["cache_control"] == {"type": "ephemeral"}
    messages = body["messages"]
    assert isinstance(messages, list)
    assert messages[1]["content"][0] == {
        "type": "thinking",
        "thinking": "I should run ls.",
        "signature": "sig-1",
    }
    assert messages[3]["content"] == [{"type": "text", "text": "Two files."}]
    assert messages[2]["content"][1]["is_error"] is True
    tail = messages[-1]["content"]
    assert tail[-1]["cache_control"] == {"type": "ephemeral"}
    assert tail[-1]["source"] == {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="}
    marks = str(body).count("cache_control")
    assert marks == 3


async def test_anthropic_thinking_budget_is_sent() -> None:
    async with serving(ANTHROPIC) as server:
        server.queue(ANTHROPIC.stream(Turn(text="ok")))
        options = ModelOptions(max_tokens=4000, thinking_budget=2048)
        await collect(ANTHROPIC.model(server, options=options))
    assert server.problems == []
    assert server.bodies[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}


async def test_openai_body_has_system_tool_messages_and_data_urls() -> None:
    """Rule: the conversation converts for OpenAI: tool results as ``role: tool`` messages,
    images as data URLs, the system prompt first; valid for the SDK's
    ``CompletionCreateParamsStreaming``."""
    async with serving(OPENAI) as server:
        server.queue(OPENAI.stream(Turn(text="ok")))
        await collect(OPENAI.model(server, options=ModelOptions(max_tokens=500)), request(*LOOP))
    assert server.problems == []
    seen = server.requests[0]
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["authorization"] == f"Bearer {SECRET}"
    body = server.bodies[0]
    assert body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 500
    messages = body["messages"]
    assert isinstance(messages, list)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
    ]
    assert messages[2]["tool_calls"][0]["function"] == {
        "name": "shell_exec",
        "arguments": '{"command": "ls"}',
    }
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"}
    assert messages[6]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,aGVsbG8="},
    }


async def test_a_compaction_request_asks_for_text_only(wire: Wire) -> None:
    """A compaction request ends with the runtime's instruction and forbids tool calls."""
    async with serving(wire) as server:
        server.queue(wire.stream(Turn(text="summary")))
        await collect(wire.model(server), request(*LOOP[:3], purpose="compact"))
    assert server.problems == []
    body = server.bodies[0]
    assert body["tool_choice"] == ({"type": "none"} if wire is ANTHROPIC else "none")
    last = body["messages"][-1]  # type: ignore[index]
    assert "Summarise the conversation" in str(last)


async def test_a_broken_conversation_fails_the_wire_check(wire: Wire) -> None:
    """Rule: a conversation rule broken (a tool call without its result) fails a test: the
    loopback API refuses it as the real one would, and the provider says ModelRejected."""
    from halo_actors.agent.model import ModelRejected

    broken = (LOOP[0], LOOP[1], user_text("no results here"))
    async with serving(wire, broken_bodies=True) as server:
        with pytest.raises(ModelRejected, match="has no tool"):
            await collect(wire.model(server), request(*broken))
    assert any("has no tool" in p for p in server.problems)


async def test_redacted_thinking_is_kept_and_sent_back() -> None:
    """An encrypted (``redacted_thinking``) block comes back as a thinking delta with its
    data, and goes back to the API as it came."""
    from wire_formats import anthropic_stream

    plain = anthropic_stream(Turn(text="done"))
    start = plain.index(b"event: content_block_start")
    redacted = (
        b'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
        b'"content_block": {"type": "redacted_thinking", "data": "EnCrYpTeD"}}\n\n'
        b'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 0}\n\n'
    )
    body = plain[:start] + redacted + plain[start:].replace(b'"index": 0', b'"index": 1')
    async with serving(ANTHROPIC) as server:
        server.queue(Reply(chunks=pieces(body, 9)))
        events = await collect(ANTHROPIC.model(server))
        assert ThinkingDelta("", redacted="EnCrYpTeD") in events
        history = Message(
            role="assistant",
            content=(ThinkingBlock(text="", redacted="EnCrYpTeD"), TextBlock(text="done")),
        )
        server.queue(ANTHROPIC.stream(Turn(text="next")))
        await collect(
            ANTHROPIC.model(server), request(user_text("hi"), history, user_text("again"))
        )
    assert server.bodies[1]["messages"][1]["content"][0] == {  # type: ignore[index]
        "type": "redacted_thinking",
        "data": "EnCrYpTeD",
    }


def test_openai_itself_gets_max_completion_tokens() -> None:
    """OpenAI's own API takes ``max_completion_tokens`` (its reasoning models refuse
    ``max_tokens``); compatible servers get ``max_tokens``, which they all know. Both
    bodies are valid for the SDK's request type."""
    from wire_check import openai_problems

    from halo_actors.agent.providers.openai import request_body

    options = ModelOptions(max_tokens=700, temperature=0.1)
    official = request_body("gpt-4.1", options, request(*LOOP), official=True)
    compatible = request_body("llama3.2", options, request(*LOOP))
    assert official["max_completion_tokens"] == 700 and "max_tokens" not in official
    assert compatible["max_tokens"] == 700 and "max_completion_tokens" not in compatible
    assert openai_problems(official) == openai_problems(compatible) == []
