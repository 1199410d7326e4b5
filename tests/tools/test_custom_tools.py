"""Custom tools: an embedding program's async functions, used by agents like the built-ins.

Each test runs a real runtime (``open_runtime``, in-memory log) whose scripted model
calls the app's tool, and reads what the log holds.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import pytest
import trio
from sandbox_check import needs_sandbox

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
    Supervisor,
    Tool,
    ToolError,
    open_runtime,
    tool,
)
from halo_actors.agent.repair import INTERRUPTED_RESULT, UI_INTERRUPTED
from halo_actors.core.errors import InvalidInput, ProfileError
from halo_actors.core.events import ToolReturned, TurnCompleted
from halo_actors.tools.registry import ToolRegistry

BUDGET = 20.0


@tool
async def forecast(
    ctx: SessionContext,
    city: Annotated[str, msgspec.Meta(description="the city's name")],
    days: int = 1,
) -> str:
    """Tomorrow's weather for a city."""
    return f"{city}: sunny for {days} day(s) (asked by {ctx.session_id} in {ctx.workspace})"


class Order(msgspec.Struct, kw_only=True):
    item: str
    count: int = 1


@tool(name="place_order", description="Order something.")
async def order(args: Order) -> dict[str, object]:
    return {"ordered": args.item, "count": args.count}


def calling(*calls: ScriptedCall, then: str = "done") -> Rule:
    return Rule(match="^use", steps=(Step(calls=calls), Step(text=then)))


@asynccontextmanager
async def app(
    tmp_path: Path, rules: Iterable[Rule], tools: Iterable[Tool], names: tuple[str, ...]
) -> AsyncIterator[Supervisor]:
    script = Script(rules=(*rules, Rule(steps=(Step(text="ok"),))))
    profiles = Profiles({"helper": AgentProfile(name="helper", tools=names)})
    async with open_runtime(
        tmp_path / "ws",
        model=ScriptedModel({"helper": script}),
        profiles=profiles,
        tools=tools,
        durable=False,
    ) as sup:
        yield sup


async def results(sup: Supervisor, sid: str) -> list[ToolReturned]:
    return [
        r.event
        for r in await sup.log.read()
        if r.session_id == sid and isinstance(r.event, ToolReturned)
    ]


def test_the_schema_is_derived_from_the_signature() -> None:
    """Rule: a custom tool's JSON schema is derived from its signature."""
    assert forecast.name == "forecast"
    assert forecast.description == "Tomorrow's weather for a city."
    assert forecast.input_schema["properties"] == {
        "city": {"type": "string", "description": "the city's name"},
        "days": {"type": "integer", "default": 1},
    }
    assert forecast.input_schema["required"] == ["city"]
    assert forecast.grace is not None


def test_a_struct_can_be_the_arguments() -> None:
    """Rule: a msgspec Struct may declare a custom tool's arguments."""
    assert (order.name, order.description) == ("place_order", "Order something.")
    assert order.input_schema["properties"] == {
        "item": {"type": "string"},
        "count": {"type": "integer", "default": 1},
    }
    assert order.input_schema["required"] == ["item"]


def test_a_tool_must_be_async_and_fully_annotated() -> None:
    def plain(x: int) -> str:
        return str(x)

    async def loose(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(TypeError, match="must be an async function"):
        tool(plain)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'x' needs a type annotation"):
        tool(loose)
    with pytest.raises(ValueError, match="must match"):
        tool(name="no spaces")(forecast_impl)


async def forecast_impl(city: str) -> str:
    return city


def test_a_custom_tool_may_not_take_a_builtin_name() -> None:
    with pytest.raises(InvalidInput, match="'shell_exec': the name is taken by a built-in"):
        ToolRegistry([tool(name="shell_exec")(forecast_impl)])
    with pytest.raises(InvalidInput, match="taken by another custom tool"):
        ToolRegistry([forecast, tool(name="forecast")(forecast_impl)])


async def test_an_app_tool_is_used_by_the_scripted_model(tmp_path: Path) -> None:
    """Rule: a custom tool receives the calling session's context; profiles list it by
    name beside the built-ins."""
    call = ScriptedCall(name="forecast", input={"city": "Oslo", "days": 2})
    with trio.fail_after(BUDGET):
        async with app(tmp_path, [calling(call)], [forecast], (*DEFAULT_TOOLS, "forecast")) as sup:
            sid = await sup.create_session(agent_id="helper")
            await sup.send(sid, "use the forecast")
            await sup.wait_idle(sid)
            (got,) = await results(sup, sid)
            workspace = (tmp_path / "ws").resolve()
            assert got.result == f"Oslo: sunny for 2 day(s) (asked by {sid} in {workspace})"
            assert not got.is_error
            assert sup.output(sid) == "done"


async def test_results_other_than_text_are_json_and_tool_errors_are_error_results(
    tmp_path: Path,
) -> None:
    @tool
    async def refuse(reason: str) -> str:
        """Always refuses."""
        raise ToolError(f"refused: {reason}")

    calls = (
        ScriptedCall(name="place_order", input={"item": "tea"}),
        ScriptedCall(name="refuse", input={"reason": "closed"}),
    )
    with trio.fail_after(BUDGET):
        async with app(
            tmp_path, [calling(*calls)], [order, refuse], ("place_order", "refuse")
        ) as sup:
            sid = await sup.create_session(agent_id="helper")
            await sup.send(sid, "use them")
            await sup.wait_idle(sid)
            got = {r.tool_name: (r.result, r.is_error) for r in await results(sup, sid)}
            assert got == {
                "place_order": ('{"ordered":"tea","count":1}', False),
                "refuse": ("refused: closed", True),
            }


async def test_arguments_that_do_not_match_the_schema_give_a_readable_error(
    tmp_path: Path,
) -> None:
    """Rule: arguments that don't match the schema give the model a readable error result."""
    bad = (
        ScriptedCall(name="forecast", input={"city": "Oslo", "days": "two"}),
        ScriptedCall(name="forecast", input={"town": "Oslo"}),
    )
    with trio.fail_after(BUDGET):
        async with app(tmp_path, [calling(*bad)], [forecast], ("forecast",)) as sup:
            sid = await sup.create_session(agent_id="helper")
            await sup.send(sid, "use it badly")
            await sup.wait_idle(sid)
            first, second = sorted(await results(sup, sid), key=lambda r: r.tool_use_id)
            expects = "Expected: city (string, required), days (integer)"
            assert first.is_error and second.is_error
            assert first.result == (
                f"invalid arguments for forecast: Expected `int`, got `str` - at `$.days`. {expects}"
            )
            assert second.result.startswith("invalid arguments for forecast: Object contains")
            assert second.result.endswith(expects)


async def test_an_unknown_tool_name_in_a_profile_is_a_clear_error(tmp_path: Path) -> None:
    """Rule: an unknown tool name stays a clear error (listing built-in and custom tools)."""
    with trio.fail_after(BUDGET), pytest.raises(ProfileError) as caught:
        async with app(tmp_path, [], [forecast], ("forcast",)):
            pass
    message = str(caught.value)
    assert message.startswith("agent profile 'helper': unknown tool 'forcast'; built-in: ")
    assert message.endswith("; custom: forecast")


async def test_a_workspace_profile_may_name_a_custom_tool(tmp_path: Path) -> None:
    agents = tmp_path / "ws" / ".halo" / "agents"
    agents.mkdir(parents=True)
    (agents / "weather.toml").write_text('tools = ["forecast", "file_read"]\n')
    script = Script(rules=(calling(ScriptedCall(name="forecast", input={"city": "Rome"})),))
    with trio.fail_after(BUDGET):
        async with open_runtime(
            tmp_path / "ws", model=ScriptedModel({"weather": script}), tools=[forecast]
        ) as sup:
            sid = await sup.create_session(agent_id="weather")
            await sup.send(sid, "use it")
            await sup.wait_idle(sid)
            (got,) = await results(sup, sid)
            assert got.result.startswith("Rome: sunny for 1 day(s)")
    (agents / "weather.toml").write_text('tools = ["forecast"]\n')
    with trio.fail_after(BUDGET):  # unregistered: that profile is broken, the runtime opens
        async with open_runtime(tmp_path / "ws") as sup:
            with pytest.raises(ProfileError, match=r"weather\.toml: `tools`"):
                await sup.create_session(agent_id="weather")


async def test_a_hard_interrupt_cancels_a_custom_tool_like_a_builtin(tmp_path: Path) -> None:
    """Rule: a hard interrupt cancels a custom tool like a built-in."""
    started, cancelled = trio.Event(), trio.Event()

    @tool
    async def wait_forever() -> str:
        """Waits until cancelled."""
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        return "never"  # pragma: no cover

    rule = calling(ScriptedCall(name="wait_forever"))
    with trio.fail_after(BUDGET):
        async with app(tmp_path, [rule], [wait_forever], ("wait_forever",)) as sup:
            sid = await sup.create_session(agent_id="helper")
            await sup.send(sid, "use it")
            await started.wait()
            await sup.interrupt(sid, "stop that")
            await cancelled.wait()
            await sup.wait_idle(sid)
            (cut,) = await results(sup, sid)
            assert (cut.result, cut.is_error, cut.ui_result) == (
                INTERRUPTED_RESULT,
                True,
                UI_INTERRUPTED,
            )


async def test_a_tool_that_ignores_cancellation_is_abandoned_after_its_grace(
    tmp_path: Path,
) -> None:
    """Rule: a tool that ignores cancellation is abandoned after a grace period and its
    result marked cut."""
    started, release, ended = trio.Event(), trio.Event(), trio.Event()

    @tool(grace=0.2)
    async def stubborn() -> str:
        """Ignores cancellation until released."""
        started.set()
        try:
            with trio.CancelScope(shield=True):
                await release.wait()
        finally:
            ended.set()
        return "late result"

    rule = calling(ScriptedCall(name="stubborn"))
    with trio.fail_after(BUDGET):
        async with app(tmp_path, [rule], [stubborn], ("stubborn",)) as sup:
            sid = await sup.create_session(agent_id="helper")
            await sup.send(sid, "use it")
            await started.wait()
            await sup.interrupt(sid, "stop that")
            await sup.wait_idle(sid)  # the turn went on without the tool
            assert not ended.is_set()
            (cut,) = await results(sup, sid)
            assert (cut.result, cut.is_error) == (INTERRUPTED_RESULT, True)
            completes = [
                r.event for r in await sup.log.read() if isinstance(r.event, TurnCompleted)
            ]
            assert [c.stop_reason for c in completes][-1] == "end_turn"
            release.set()
            await ended.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert await results(sup, sid) == [cut]  # the late result was dropped


@tool
async def where(ctx: SessionContext) -> str:
    """Run a command as the session would, and say how it ran."""
    out = await ctx.shell("echo home=$HOME")
    return f"{ctx.access} sandboxed={ctx.sandboxed}: {out.text.splitlines()[0]}"


async def where_in(
    tmp_path: Path, access: Literal["full", "workspace", "readonly"]
) -> ToolReturned:
    rule = calling(ScriptedCall(name="where"))
    async with app(tmp_path, [rule], [where], ("where",)) as sup:
        sid = await sup.create_session(agent_id="helper", access=access)
        await sup.send(sid, "use it")
        await sup.wait_idle(sid)
        (got,) = await results(sup, sid)
        return got


async def test_a_custom_tool_runs_commands_at_its_sessions_access_level(tmp_path: Path) -> None:
    """Rule: a custom tool's context carries the session's access level and sandbox; a
    command it runs is confined like the session's own shell (fail closed)."""
    with trio.fail_after(BUDGET):
        full = await where_in(tmp_path / "a", "full")
        readonly = await where_in(tmp_path / "b", "readonly")
    assert full.result == f"full sandboxed=False: home={os.environ['HOME']}" and not full.is_error
    assert (readonly.result, readonly.is_error) == ("a read-only session has no shell", True)


@needs_sandbox()
async def test_a_workspace_sessions_custom_tool_runs_commands_in_the_sandbox(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BUDGET):
        got = await where_in(tmp_path, "workspace")
    workspace = (tmp_path / "ws").resolve()
    assert (got.result, got.is_error) == (f"workspace sandboxed=True: home={workspace}", False)
