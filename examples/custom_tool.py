"""A custom tool: an app's own async function, offered to an agent beside the built-ins.

    python examples/custom_tool.py [WORKSPACE]

``@tool`` derives the JSON schema from the signature; the first parameter receives
the calling session's context. The agent profile names the tool; the scripted
model here plays the part of a real one and calls it (with good and bad input).
"""

from __future__ import annotations

import sys
from typing import Annotated

import msgspec
import trio
import trio.lowlevel

from halo_actors import (
    DEFAULT_TOOLS,
    AgentProfile,
    Profiles,
    Rule,
    Script,
    ScriptedCall,
    ScriptedModel,
    SessionContext,
    Step,
    ToolReturned,
    open_runtime,
    tool,
)

STOCK = {"tea": 12, "coffee": 0}


@tool
async def check_stock(
    ctx: SessionContext,
    item: Annotated[str, msgspec.Meta(description="what to look up, e.g. tea")],
    warehouse: str = "main",
) -> dict[str, object]:
    """How many of an item are in stock."""
    await trio.lowlevel.checkpoint()  # a real tool would ask a database or a service here
    return {"item": item, "warehouse": warehouse, "count": STOCK.get(item, 0), "by": ctx.agent_id}


SCRIPT = Script(
    rules=(
        Rule(
            match="stock",
            steps=(
                Step(
                    text="Checking both. ",
                    calls=(
                        ScriptedCall(name="check_stock", input={"item": "tea"}),
                        ScriptedCall(name="check_stock", input={"item": 7}),  # a bad call
                    ),
                ),
                Step(text="We have 12 tea."),
            ),
        ),
    )
)

PROFILES = Profiles({"clerk": AgentProfile(name="clerk", tools=(*DEFAULT_TOOLS, "check_stock"))})


async def main(workspace: str) -> None:
    async with open_runtime(
        workspace,
        model=ScriptedModel({"clerk": SCRIPT}),
        profiles=PROFILES,
        tools=[check_stock],
    ) as sup:
        session = await sup.create_session(namespace="example", agent_id="clerk")
        await sup.send(session, "how much stock of tea?")
        await sup.wait_idle(session)
        for record in await sup.log.read():
            if record.session_id == session and isinstance(record.event, ToolReturned):
                flag = "error" if record.event.is_error else "ok"
                print(f"{record.event.tool_name} [{flag}]: {record.event.result}")
        print("answer:", sup.output(session))


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "example-workspace")
