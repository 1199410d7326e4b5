"""A server with a real model and a tool of your own: the HTTP front, embedded.

    export ANTHROPIC_API_KEY=sk-ant-...        # or OPENAI_API_KEY with openai:<model>
    python examples/real_model_server.py --model anthropic:claude-sonnet-4-5 --workspace ws

It prints the URL and a fresh ``full`` token, then serves until Ctrl-C (or SIGTERM).
Every session's agent may call ``forecast`` beside the built-in tools; try

    curl -N -H "x-token: $TOKEN" -d '{"message": "weather in Oslo?"}' $URL/api/web/chat

The endpoint comes from the environment as the official SDKs read it
(``ANTHROPIC_BASE_URL``, ``OPENAI_BASE_URL``); the tests point it at a local server
speaking the provider's wire format.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Annotated

import msgspec
import trio
import trio.lowlevel

from halo_actors import DEFAULT_TOOLS, SessionContext, tool
from halo_actors.fronts.http.app import FrontSettings
from halo_actors.fronts.http.server import open_server
from halo_actors.fronts.http.tokens import TokenStore
from halo_actors.runtime.models import resolve_model


@tool
async def forecast(
    ctx: SessionContext,
    city: Annotated[str, msgspec.Meta(description="the city's name")],
    days: int = 1,
) -> str:
    """Tomorrow's weather for a city."""
    await trio.lowlevel.checkpoint()  # a real tool would call a weather service here
    return f"{city}: sunny for {days} day(s)"


def agent_profile(workspace: Path) -> None:
    """The default agent of this workspace gets the tool (a profile file, as a user
    would write one: ``<workspace>/.halo/agents/default.toml``)."""
    folder = workspace / ".halo" / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    tools = ", ".join(f'"{name}"' for name in (*DEFAULT_TOOLS, "forecast"))
    (folder / "default.toml").write_text(f"tools = [{tools}]\n")


async def main(args: argparse.Namespace, workspace: Path) -> None:
    tokens = TokenStore(args.state)
    token = tokens.create("me", "full", workspace)
    model = resolve_model(args.model)  # reads the key and endpoint from the environment
    settings = FrontSettings(tokens=tokens, model=model, tools=(forecast,))
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_server(settings, port=args.port, workspaces=(workspace,)) as server:
            print(f"URL={server.url}", flush=True)
            print(f"TOKEN={token}", flush=True)
            async for _ in signals:
                break
    aclose = getattr(model, "aclose", None)
    if aclose is not None:
        await aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="anthropic:<model> or openai:<model>")
    parser.add_argument("--workspace", default="ws", help="the workspace directory")
    parser.add_argument("--state", default="state", help="where the token file lives")
    parser.add_argument("--port", type=int, default=9527)
    arguments = parser.parse_args()
    root = Path(arguments.workspace).resolve()
    root.mkdir(parents=True, exist_ok=True)
    agent_profile(root)
    trio.run(main, arguments, root)
