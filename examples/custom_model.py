"""A custom model: anything with ``stream(request)`` yielding deltas, tool calls and a Stop.

    python examples/custom_model.py [WORKSPACE]

This one is a tiny rule-based "model": asked for the time it calls the built-in
``shell_exec`` tool with ``date``, then answers with what the tool returned. A
real provider does the same translation between ``ModelRequest`` and its API.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import trio

from halo_actors import (
    Message,
    ModelEvent,
    ModelRequest,
    Stop,
    TextDelta,
    ToolUse,
    open_runtime,
)


class ClockModel:
    """Implements the ``Model`` protocol."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if request.purpose == "compact":  # asked to summarise the conversation
            yield TextDelta(f"{len(request.messages)} earlier messages.")
            yield Stop("end_turn")
            return
        last = request.messages[-1]
        result = _tool_result(last)
        if result is not None:  # the tool answered: say so
            for word in f"It is {result.strip()}.".split(" "):
                yield TextDelta(word + " ")
            yield Stop("end_turn")
        elif "time" in request.round.text and any(t.name == "shell_exec" for t in request.tools):
            yield ToolUse(f"call_{request.step}", "shell_exec", {"command": "date -u +%H:%M"})
            yield Stop("tool_use")
        else:
            yield TextDelta("Ask me for the time.")
            yield Stop("end_turn")


def _tool_result(message: Message) -> str | None:
    for block in message.content:
        content = getattr(block, "content", None)
        if isinstance(content, str):
            return content.split("\n", 1)[0]
    return None


async def main(workspace: str) -> None:
    async with open_runtime(workspace, model=ClockModel()) as sup:
        session = await sup.create_session(namespace="example")
        await sup.send(session, "what time is it?")
        await sup.wait_idle(session)
        print(sup.output(session))


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "example-workspace")
