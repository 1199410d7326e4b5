"""A stop cascade pauses the cyclic GC while the runs it cut unwind (``gcpause.py``):
only if it was on, at most ``GC_PAUSE_SECONDS``, and leaves it as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing
from runtime_harness import BUDGET, Rule, Step, call

from halo_actors.agent.scripted import Script, ScriptedModel
from halo_actors.core.log import MemoryEventLog
from halo_actors.runtime.gcpause import GC_PAUSE_SECONDS
from halo_actors.runtime.profiles import DEFAULT_TOOLS, AgentProfile, Profiles
from halo_actors.runtime.supervisor import open_supervisor
from halo_actors.tools.base import Tool, ToolContext, ToolOutput, define_tool
from halo_actors.tools.files import Workspace

SLOW_CLEANUP = GC_PAUSE_SECONDS + 3.0


class _NoArgs(msgspec.Struct, frozen=True):
    pass


class Seen:
    """What the blocking tool saw of the collector when it was cut, and later."""

    def __init__(self) -> None:
        self.entered = 0
        self.at_cut: list[bool] = []
        self.after_slow_cleanup: list[bool] = []


def blocking_tool(seen: Seen, cleanup: float) -> Tool:
    async def block(ctx: ToolContext, args: _NoArgs) -> ToolOutput:
        seen.entered += 1
        try:
            await trio.sleep_forever()
        finally:
            seen.at_cut.append(gc.isenabled())
            if cleanup:
                with trio.CancelScope(shield=True):
                    await trio.sleep(cleanup)
                seen.after_slow_cleanup.append(gc.isenabled())
        raise AssertionError("unreachable")  # pragma: no cover

    return define_tool("block", "Blocks until cancelled.", _NoArgs, block)


@pytest.fixture
def collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    try:
        yield
    finally:
        (gc.enable if enabled else gc.disable)()


async def stop_a_tree(tmp_path: Path, seen: Seen, cleanup: float, leaves: int = 5) -> None:
    script = Script(rules=(Rule(steps=(Step(calls=(call("block"),)),)),))
    profile = AgentProfile(name="default", tools=(*DEFAULT_TOOLS, "block"))
    async with open_supervisor(
        MemoryEventLog(),
        ScriptedModel({"default": script}),
        workspace=Workspace(tmp_path),
        profiles=Profiles({"default": profile}),
        tools=[blocking_tool(seen, cleanup)],
    ) as sup:
        root = await sup.create_session(namespace="cli")
        for i in range(leaves):
            await sup.create_session(f"{root}>leaf{i}", parent_id=root)
            await sup.send(f"{root}>leaf{i}", "block")
        await trio.testing.wait_all_tasks_blocked()
        assert seen.entered == leaves
        await sup.stop(root)
        assert all(sup.state(f"{root}>leaf{i}").lifecycle == "stopped" for i in range(leaves))


async def test_a_stop_pauses_the_collector_while_its_runs_unwind_and_restores_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, collector_restored: None
) -> None:
    """Rule: a cascade pauses the cyclic GC while the runs it cut unwind, then turns it
    back on (it was on)."""
    gc.enable()
    seen = Seen()
    with trio.fail_after(BUDGET):
        await stop_a_tree(tmp_path, seen, cleanup=0)
    assert seen.at_cut == [False] * 5
    assert gc.isenabled()


async def test_the_pause_is_lifted_after_its_bound_while_a_run_still_unwinds(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, collector_restored: None
) -> None:
    """Rule: the pause lasts at most ``GC_PAUSE_SECONDS``: a run whose cleanup takes longer
    (a command's kill grace) sees the collector on again before it ends."""
    gc.enable()
    seen = Seen()
    with trio.fail_after(BUDGET + SLOW_CLEANUP):
        await stop_a_tree(tmp_path, seen, cleanup=SLOW_CLEANUP, leaves=2)
    assert seen.at_cut == [False, False]
    assert seen.after_slow_cleanup == [True, True]
    assert gc.isenabled()


async def test_a_collector_the_embedder_turned_off_stays_off(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, collector_restored: None
) -> None:
    """Rule: the cascade never turns on a collector it did not turn off."""
    gc.disable()
    seen = Seen()
    with trio.fail_after(BUDGET):
        await stop_a_tree(tmp_path, seen, cleanup=0)
    assert seen.at_cut == [False] * 5
    assert not gc.isenabled()
