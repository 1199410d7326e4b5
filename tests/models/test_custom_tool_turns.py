"""An app-defined tool in a real provider turn: the provider offers the tool's derived
schema to the API (each wire format, on a loopback server), the API's call runs the
app's function with the session's context, and its result goes back on the wire."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import httpx
import msgspec
import pytest
import trio
from provider_kit import BUDGET, WIRES, Wire, results_in, serving
from wire_formats import Call, Turn
from wire_server import Reply, Seen

from halo_actors import (
    DEFAULT_TOOLS,
    AgentProfile,
    Profiles,
    SessionContext,
    ToolReturned,
    open_runtime,
    tool,
)

calls_seen: list[tuple[str, str, int]] = []


@tool
async def forecast(
    ctx: SessionContext,
    city: Annotated[str, msgspec.Meta(description="the city's name")],
    days: int = 1,
) -> str:
    """Tomorrow's weather for a city."""
    calls_seen.append((ctx.session_id, city, days))
    return f"{city}: sunny for {days} day(s)"


def offered(seen: Seen) -> dict[str, object]:
    """The ``forecast`` tool as the request offered it, in either wire format."""
    for entry in seen.body["tools"]:  # type: ignore[index]
        spec = entry.get("function", entry)
        if spec["name"] == "forecast":
            return {
                "name": spec["name"],
                "description": spec["description"],
                "schema": spec.get("input_schema", spec.get("parameters")),
            }
    raise AssertionError("forecast was not offered")


def weather_turns(wire: Wire) -> object:
    def answer(seen: Seen) -> Reply:
        results = results_in(seen)
        if not results:
            calls = [
                Call("call_1", "forecast", {"city": "Oslo", "days": 2}),
                Call("call_2", "forecast", {"town": "Oslo"}),
            ]
            return wire.stream(Turn(text="Looking.", calls=calls))
        sunny = next(r for r in results if "sunny" in r)
        return wire.stream(Turn(text=f"Forecast: {sunny}"))

    return answer


@pytest.mark.parametrize("wire", WIRES, ids=lambda w: w.name)
async def test_an_app_tool_in_a_real_provider_turn(wire: Wire, tmp_path: Path) -> None:
    """Rule: a custom tool is used by a real provider turn (local server)."""
    calls_seen.clear()
    profiles = Profiles(
        {"default": AgentProfile(name="default", tools=(*DEFAULT_TOOLS, "forecast"))}
    )
    with trio.fail_after(BUDGET):
        async with serving(wire, weather_turns(wire)) as server:  # type: ignore[arg-type]
            model = wire.model(server)
            async with open_runtime(
                tmp_path / "ws", model=model, profiles=profiles, tools=[forecast]
            ) as sup:
                sid = await sup.create_session()
                await sup.send(sid, "weather in Oslo?")
                await sup.wait_idle(sid)
                returned = [
                    r.event
                    for r in await sup.log.read()
                    if isinstance(r.event, ToolReturned) and r.session_id == sid
                ]
                output = sup.output(sid)
            await model.aclose()
    first, second = server.requests[0], server.requests[1]
    assert offered(first) == {
        "name": "forecast",
        "description": "Tomorrow's weather for a city.",
        "schema": forecast.input_schema,
    }
    assert calls_seen == [(sid, "Oslo", 2)]
    by_id = {r.tool_use_id: r for r in returned}
    assert (by_id["call_1"].result, by_id["call_1"].is_error) == ("Oslo: sunny for 2 day(s)", False)
    assert (
        by_id["call_2"].is_error and "Expected: city (string, required)" in by_id["call_2"].result
    )
    on_the_wire = json.dumps(results_in(second))
    assert "Oslo: sunny for 2 day(s)" in on_the_wire and "invalid arguments" in on_the_wire
    assert output.endswith("Forecast: Oslo: sunny for 2 day(s)")


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "real_model_server.py"


async def read_until(stream: trio.abc.ReceiveStream, count: int) -> list[str]:
    """The first ``count`` lines a process writes."""
    data = b""
    while data.count(b"\n") < count:
        chunk = await stream.receive_some()
        if not chunk:
            raise AssertionError(f"the process ended after {data!r}")
        data += chunk
    return data.decode().splitlines()[:count]


@pytest.mark.parametrize("wire", WIRES, ids=lambda w: w.name)
async def test_the_real_model_server_example_serves_a_custom_tool(
    wire: Wire, tmp_path: Path
) -> None:
    """Rule: the "server with a real model" example runs (a local fake endpoint)."""
    with trio.fail_after(BUDGET * 2):
        async with serving(wire, weather_turns(wire)) as server:  # type: ignore[arg-type]
            env = {**os.environ, **wire.env(server)}
            argv = [sys.executable, str(EXAMPLE), "--model", f"{wire.name}:test-model"]
            argv += ["--port", "0", "--workspace", "ws", "--state", "state"]
            process = await trio.lowlevel.open_process(
                argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE
            )
            try:
                assert process.stdout is not None
                url_line, token_line = await read_until(process.stdout, 2)
                url, token = url_line.removeprefix("URL="), token_line.removeprefix("TOKEN=")
                async with httpx.AsyncClient(base_url=url, headers={"x-token": token}) as client:
                    chat = {"message": "weather in Oslo?"}
                    async with client.stream("POST", "/api/web/chat", json=chat) as resp:
                        frames = [
                            json.loads(line.removeprefix("data:"))
                            async for line in resp.aiter_lines()
                            if line.startswith("data:")
                        ]
            finally:
                process.send_signal(signal.SIGTERM)
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await process.wait()
                process.kill()
    assert process.returncode == 0
    calls = [f["toolName"] for f in frames if f["type"] == "tool_call"]
    assert calls == ["forecast", "forecast"]
    said = "".join(f["text"] for f in frames if f["type"] == "stream")
    assert said.endswith("Forecast: Oslo: sunny for 2 day(s)")
    assert frames[-1]["type"] == "complete"
