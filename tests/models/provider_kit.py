"""What the provider tests share: each API as a :class:`Wire` (its checker, stream
writer, error bodies, endpoint variables), a loopback server per test, fast retries.

A test parametrized over ``WIRES`` runs once per provider with the same expectations;
only the wire format differs.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio
from wire_check import anthropic_problems, openai_problems
from wire_formats import Call, Turn, anthropic_stream, error_body, openai_stream, pieces
from wire_server import Checker, Reply, Seen, WireServer

from halo_actors.agent.model import ModelEvent, ModelRequest, RoundInfo
from halo_actors.agent.providers import AnthropicModel, OpenAIModel, Provider, RetryPolicy
from halo_actors.agent.providers.options import ModelOptions
from halo_actors.core.conversation import Message, TextBlock, user_text
from halo_actors.core.events import AssistantReplied
from halo_actors.tools.base import ToolSpec

SECRET = "sk-test-0123456789-SECRET-KEY"
"""The API key every test uses; no log, error or frame may ever show it."""

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05, total=20.0, stall=5.0, connect=5.0)
BUDGET = 20.0


@dataclass(frozen=True)
class Wire:
    name: str
    check: Checker
    key_env: str
    base_env: str
    path: str

    def stream(self, turn: Turn, size: int = 7) -> Reply:
        body = anthropic_stream(turn) if self.name == "anthropic" else openai_stream(turn)
        return Reply(chunks=pieces(body, size))

    def error(self, status: int, kind: str, message: str, *headers: tuple[str, str]) -> Reply:
        return Reply(status, (error_body(kind, message, openai=self.name == "openai"),), headers)

    def base_url(self, server: WireServer) -> str:
        return server.url if self.name == "anthropic" else server.url + "/v1"

    def env(self, server: WireServer, key: str = SECRET) -> dict[str, str]:
        return {self.base_env: self.base_url(server), self.key_env: key}

    def model(
        self,
        server: WireServer,
        *,
        key: str = SECRET,
        retry: RetryPolicy = FAST,
        options: ModelOptions | None = None,
    ) -> Provider:
        kind = AnthropicModel if self.name == "anthropic" else OpenAIModel
        return kind("test-model", env=self.env(server, key), retry=retry, options=options)


ANTHROPIC = Wire(
    "anthropic", anthropic_problems, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "/v1/messages"
)
OPENAI = Wire(
    "openai", openai_problems, "OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1/chat/completions"
)
WIRES = [ANTHROPIC, OPENAI]


@asynccontextmanager
async def serving(
    wire: Wire, answer: Callable[[Seen], Reply] | None = None, *, broken_bodies: bool = False
) -> AsyncIterator[WireServer]:
    """A loopback API for one test. Every request body it received must pass the wire
    check (the SDK's request type and the conversation rules), unless the test sends a
    broken one on purpose (``broken_bodies``)."""
    async with trio.open_nursery() as nursery:
        server = await nursery.start(WireServer(wire.check, answer).serve)
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
    assert broken_bodies or server.problems == [], server.problems


SHELL = ToolSpec(
    name="shell_exec",
    description="Run a shell command.",
    input_schema={
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
)


def request(*messages: Message, purpose: str = "turn") -> ModelRequest:
    return ModelRequest(
        session_id="s1",
        agent_id="default",
        system="You are a test agent.",
        messages=messages or (user_text("hello"),),
        tools=(SHELL,),
        round=RoundInfo(text="hello", kind="opening"),
        step=0,
        purpose=purpose,  # type: ignore[arg-type]
    )


async def collect(model: Provider, req: ModelRequest | None = None) -> list[ModelEvent]:
    with trio.fail_after(BUDGET):
        return [event async for event in model.stream(req or request())]


def reply_text(event: AssistantReplied) -> str:
    return "".join(b.text for b in event.content if isinstance(b, TextBlock))


def results_in(seen: Seen) -> list[str]:
    """The tool results a request carries, in either wire format."""
    body = json.dumps(seen.body)
    found = []
    for message in seen.body["messages"]:  # type: ignore[index]
        if message.get("role") == "tool":
            found.append(message["content"])
        elif isinstance(message.get("content"), list):
            found += [b["content"] for b in message["content"] if b.get("type") == "tool_result"]
    return found if body else []


def is_compaction(seen: Seen) -> bool:
    return "Summarise the conversation" in json.dumps(seen.body["messages"][-1])  # type: ignore[index]


def tool_loop(wire: Wire, command: str = "echo from-shell") -> Callable[[Seen], Reply]:
    """The model of a tool-using turn: run ``command``, then answer with its output."""

    def answer(seen: Seen) -> Reply:
        results = results_in(seen)
        if not results:
            call = Call("call_1", "shell_exec", {"command": command})
            return wire.stream(
                Turn(text="Running it.", thinking="plan", signature="sig-9", calls=[call])
            )
        return wire.stream(
            Turn(text=f"The command said: {results[-1].splitlines()[0]}", cache_read=80)
        )

    return answer
