"""A cut tool batch answers every call once, by whether it started, for a batch of one
(run in the turn's task, no nursery) as for a parallel one; what a cut leaves behind
goes through the host's ``land`` (never cancelled), not ``emit``.

The turn loop's host is a small fake here (the seam ``TurnHost``); the tool blocks
until it is cancelled.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import msgspec
import trio
import trio.testing

from halo_actors.agent.model import ToolUse
from halo_actors.agent.repair import INTERRUPTED_RESULT, NOT_RUN_RESULT, UI_INTERRUPTED, UI_NOT_RUN
from halo_actors.agent.scripted import Script, ScriptedModel
from halo_actors.agent.turn import TurnSetup, run_batch
from halo_actors.core.conversation import Message
from halo_actors.core.events import Event, ToolReturned
from halo_actors.tools.base import ToolContext, ToolOutput, TreeControl, TurnControl, define_tool
from halo_actors.tools.files import Workspace

BUDGET = 5.0


class _NoArgs(msgspec.Struct, frozen=True):
    pass


class Host:
    """Records what the batch emits, and what it lands after a cut, apart."""

    session_id = "cli_1_abc"
    agent_id = "default"

    def __init__(self) -> None:
        self.emitted: list[Event] = []
        self.landed: list[Event] = []

    async def emit(self, *events: Event) -> None:
        await trio.lowlevel.checkpoint()  # an emit may wait: only a shielded one survives a cut
        self.emitted += events

    async def land(self, *events: Event) -> None:
        self.landed += events

    def model_messages(self, *, afresh: bool = False) -> tuple[Message, ...]:
        return ()

    def model_chars(self, messages: tuple[Message, ...]) -> int:
        return 0

    async def at_batch_boundary(self) -> bool:
        return False


def setup(tmp_path: Path, started: list[str]) -> TurnSetup:
    async def block(ctx: ToolContext, args: _NoArgs) -> ToolOutput:
        started.append("block")
        await trio.sleep_forever()

    async def quick(ctx: ToolContext, args: _NoArgs) -> ToolOutput:
        return ToolOutput("quick done")

    tools = {
        "block": define_tool("block", "Blocks until cancelled.", _NoArgs, block),
        "quick": define_tool("quick", "Answers at once.", _NoArgs, quick),
    }
    context = ToolContext(
        session_id=Host.session_id,
        agent_id=Host.agent_id,
        workspace=Workspace(tmp_path),
        tree=cast(TreeControl, None),  # neither tool touches the tree or the turn
        turn=cast(TurnControl, None),
    )
    return TurnSetup(
        model=ScriptedModel({"default": Script(rules=())}),
        tools=tools,
        specs=(),
        tool_context=context,
    )


def results(events: list[Event]) -> dict[str, ToolReturned]:
    return {e.tool_use_id: e for e in events if isinstance(e, ToolReturned)}


async def run_batch_cut_once_blocked(
    host: Host, turn_setup: TurnSetup, uses: list[ToolUse]
) -> None:
    """Run a batch in a turn that is cut once every task is blocked (a call is running)."""
    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as turn:

            async def cut_once_blocked() -> None:
                await trio.testing.wait_all_tasks_blocked()
                turn.cancel()

            nursery.start_soon(cut_once_blocked)
            await run_batch(host, turn_setup, uses)


async def test_lone_call_cut_while_it_runs_lands_the_do_not_retry_result(tmp_path: Path) -> None:
    host, started = Host(), list[str]()
    with trio.fail_after(BUDGET):
        await run_batch_cut_once_blocked(
            host, setup(tmp_path, started), [ToolUse("u1", "block", {})]
        )

    assert started == ["block"]
    assert host.emitted == []
    (cut,) = host.landed
    assert isinstance(cut, ToolReturned) and cut.tool_use_id == "u1"
    assert (cut.result, cut.ui_result, cut.is_error) == (INTERRUPTED_RESULT, UI_INTERRUPTED, True)


async def test_lone_call_of_a_turn_cut_before_the_batch_is_not_run(tmp_path: Path) -> None:
    host, started = Host(), list[str]()
    with trio.fail_after(BUDGET), trio.CancelScope() as turn:
        turn.cancel()  # the cut landed before the batch (pipelined appends never checkpoint)
        await run_batch(host, setup(tmp_path, started), [ToolUse("u1", "block", {})])

    assert started == []
    (cut,) = host.landed
    assert isinstance(cut, ToolReturned)
    assert (cut.result, cut.ui_result, cut.is_error) == (NOT_RUN_RESULT, UI_NOT_RUN, True)


async def test_parallel_batch_cut_lands_finished_results_and_marks_the_rest(
    tmp_path: Path,
) -> None:
    host, started = Host(), list[str]()
    uses = [ToolUse("u1", "quick", {}), ToolUse("u2", "block", {})]
    with trio.fail_after(BUDGET):
        await run_batch_cut_once_blocked(host, setup(tmp_path, started), uses)

    assert results(host.emitted)["u1"].result == "quick done"
    assert list(results(host.landed)) == ["u2"]
    assert results(host.landed)["u2"].result == INTERRUPTED_RESULT


async def test_parallel_batch_of_a_turn_cut_before_the_batch_is_not_run(tmp_path: Path) -> None:
    """Within ``max_parallel_tools`` a batch has no limiter (whose acquire checkpointed):
    each call still checks for a cut before it counts as started or enters its tool."""
    host, started = Host(), list[str]()
    uses = [ToolUse("u1", "block", {}), ToolUse("u2", "block", {})]
    with trio.fail_after(BUDGET), trio.CancelScope() as turn:
        turn.cancel()
        await run_batch(host, setup(tmp_path, started), uses)

    assert started == []
    assert host.emitted == []
    cut = results(host.landed)
    assert list(cut) == ["u1", "u2"]
    assert {(c.result, c.ui_result) for c in cut.values()} == {(NOT_RUN_RESULT, UI_NOT_RUN)}
