"""The editor snippets in ``docs/acp.md`` work: each one, run as its editor would run it."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import trio
from acp_harness import Rig

DOCS = Path(__file__).resolve().parents[2] / "docs" / "acp.md"


def _snippets() -> list[dict[str, object]]:
    blocks = re.findall(r"```json\n(.*?)```", DOCS.read_text(), re.DOTALL)
    found = [json.loads(b) for b in blocks if '"agent_servers"' in b]
    assert len(found) == 2, "one snippet for Zed, one for JetBrains"
    return found


@pytest.mark.parametrize("snippet", _snippets(), ids=["zed", "jetbrains"])
async def test_a_documented_editor_entry_starts_a_working_adapter(
    rig: Rig, snippet: dict[str, object]
) -> None:
    servers = snippet["agent_servers"]
    assert isinstance(servers, dict)
    [entry] = servers.values()
    command, args, env = entry["command"], list(entry["args"]), dict(entry["env"])
    # this checkout's interpreter for the documented one; this test's server and token
    assert command.endswith(("/halo-actors", "/python"))
    program = [sys.executable, *(["-m", "halo_actors"] if command.endswith("halo-actors") else [])]
    args[args.index("--port") + 1] = str(rig.proxy.port)
    env["HALO_ACTORS_TOKEN"] = rig.token()
    with trio.fail_after(10):
        async with rig.run([*program, *args], env=env) as agent:
            await agent.result("initialize", {"protocolVersion": 1})
            session_id = await agent.new_session()
            answer = await agent.prompt(session_id, "hello")
    assert answer["result"] == {"stopReason": "end_turn"}
    assert agent.text(session_id) == "Done: hello"
