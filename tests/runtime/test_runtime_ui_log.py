"""The person-facing UI log: results keep parallel calls in order, abort markers are
written once and say whether the call started, and a stopped sub-session's log is
complete the moment stop returns."""

from __future__ import annotations

from pathlib import Path

import trio
from runtime_harness import (
    ANSWER_ANYTHING,
    SHELL_BUDGET,
    Rule,
    Step,
    call,
    poll_until,
    profiles_with,
    read_pid,
    running,
)

from halo_actors.agent.repair import (
    INTERRUPTED_RESULT,
    NOT_RUN_RESULT,
    UI_INTERRUPTED,
    UI_NOT_RUN,
)
from halo_actors.core.conversation import ToolUseBlock
from halo_actors.core.events import (
    AgentStarted,
    AssistantReplied,
    Event,
    MessageQueued,
    Record,
    RoundStarted,
    SessionCreated,
    ToolCalled,
    ToolReturned,
)
from halo_actors.core.log import MemoryEventLog
from halo_actors.core.state import replay

SID = "cli_1700000000000_0badcafe"


def ui_after(*events: Event) -> list[str | None]:
    records = [Record(seq=i, session_id=SID, ts=i, event=e) for i, e in enumerate(events, 1)]
    return [u.output for u in replay(SID, records).ui if u.kind == "tool"]


def called(tool_id: str) -> ToolCalled:
    return ToolCalled(tool_name="shell_exec", tool_use_id=tool_id)


def returned(tool_id: str, result: str) -> ToolReturned:
    return ToolReturned(tool_name="shell_exec", tool_use_id=tool_id, result=result)


def test_tool_result_attaches_to_its_own_entry_out_of_order() -> None:
    outputs = ui_after(
        SessionCreated(agent_id="default"),
        AgentStarted(),
        called("a"),
        called("b"),
        returned("b", "B"),
        returned("a", "A"),
    )
    assert outputs == ["A", "B"]


def test_tool_result_without_a_known_id_attaches_to_the_first_pending_entry() -> None:
    outputs = ui_after(
        SessionCreated(agent_id="default"),
        AgentStarted(),
        called("a"),
        called("b"),
        returned("", "first"),
        returned("", "second"),
    )
    assert outputs == ["first", "second"]


def test_tool_result_never_overwrites_a_completed_entry() -> None:
    outputs = ui_after(
        SessionCreated(agent_id="default"),
        AgentStarted(),
        called("a"),
        called("b"),
        returned("a", "A"),
        returned("a", "A again"),
        returned("a", "A a third time"),
    )
    assert outputs == ["A", "A again"]


def test_ui_result_is_what_a_person_sees_when_it_differs() -> None:
    outputs = ui_after(
        SessionCreated(agent_id="default"),
        AgentStarted(),
        called("a"),
        ToolReturned(
            tool_name="shell_exec",
            tool_use_id="a",
            result=INTERRUPTED_RESULT,
            is_error=True,
            ui_result=UI_INTERRUPTED,
        ),
    )
    assert outputs == [UI_INTERRUPTED]


SPAWN_WORKER = Rule(
    match=r"^spawn",
    steps=(
        Step(calls=(call("start_session", task="worker task"),)),
        Step(text="waiting", delay=30),
    ),
)
WORKER = Rule(
    match=r"worker task",
    steps=(Step(calls=(call("shell_exec", command="echo $$ > worker.pid; sleep 60"),)),),
)


async def test_stopped_sub_session_ui_log_is_marked_the_moment_stop_returns(
    tmp_path: Path,
) -> None:
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, SPAWN_WORKER, WORKER, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "spawn a worker")
            await poll_until(lambda: read_pid(tmp_path / "worker.pid") is not None)
            (child,) = rt.sup.children(sid)
            await rt.sup.stop(sid)

            tools = [u for u in rt.sup.state(child).ui if u.kind == "tool"]
            assert [u.output for u in tools] == [UI_INTERRUPTED]


async def test_abort_markers_are_written_once(tmp_path: Path) -> None:
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, SPAWN_WORKER, WORKER, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "spawn a worker")
            await poll_until(lambda: read_pid(tmp_path / "worker.pid") is not None)
            (child,) = rt.sup.children(sid)
            await rt.sup.interrupt(child, "stop that", source=sid)
            await rt.wait_for(child, ToolReturned)
            await rt.sup.stop(sid)  # a second abort finds nothing pending
            await rt.sup.stop(sid)

            assert len(await rt.results(child)) == 1
            tools = [u for u in rt.sup.state(child).ui if u.kind == "tool"]
            assert [u.output for u in tools] == [UI_INTERRUPTED]


PARALLEL_SLOW = Rule(
    match=r"^work",
    steps=(
        Step(
            calls=tuple(call("shell_exec", command=f"echo $$ > {n}.pid; sleep 60") for n in "abc")
        ),
    ),
)


async def test_cut_marker_says_whether_the_call_started_not_where_it_stands(
    tmp_path: Path,
) -> None:
    """Rule: "The marker depends on whether the call *started*, not on its position".
    Two calls of a parallel batch run when a hard interrupt lands, a third waits for a
    slot (which two start first is trio's choice): both started calls show
    ``[interrupted by user]``, the waiting one ``[not run — interrupted]``, as the
    model side says."""
    profiles = profiles_with(max_parallel_tools=2)
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, PARALLEL_SLOW, ANSWER_ANYTHING, profiles=profiles) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "work now")
            pid_files = [tmp_path / f"{n}.pid" for n in "abc"]
            await poll_until(lambda: sum(read_pid(p) is not None for p in pid_files) == 2)
            await rt.sup.interrupt(sid, "stop that")
            await rt.sup.wait_idle(sid)

            started = {p.stem for p in pid_files if p.exists()}  # two slots: two started
            assert len(started) == 2
            shown = {
                str(u.tool_input["command"]).split(" > ")[1][0]: u.output
                for u in rt.sup.state(sid).ui
                if u.kind == "tool" and u.tool_input is not None
            }
            assert shown == {n: UI_INTERRUPTED if n in started else UI_NOT_RUN for n in "abc"}
            results = [r.result for r in await rt.results(sid)]
            assert sorted(results) == sorted([INTERRUPTED_RESULT] * 2 + [NOT_RUN_RESULT])
            await rt.assert_replay_matches(sid)


async def test_a_restart_marks_every_call_it_cut_as_the_model_is_told(tmp_path: Path) -> None:
    """Rule: the marker depends on whether the call started, "and the same rule in the
    crash-closing path": every call a crash cut is answered ``[interrupted]`` for the
    model (it may have run), so a person sees ``[interrupted by user]`` for each."""
    uses = tuple(
        ToolUseBlock(id=f"toolu_{n}", name="shell_exec", input={"command": "sleep 60"})
        for n in "ab"
    )
    log = MemoryEventLog()
    await log.append(
        SID,
        SessionCreated(agent_id="default"),
        MessageQueued(text="go"),
        RoundStarted(text="go", drained=1),
        AgentStarted(),
        AssistantReplied(content=uses, stop_reason="tool_use"),
        *[ToolCalled(tool_name=u.name, tool_use_id=u.id, tool_input=u.input) for u in uses],
    )
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
            tools = [u for u in rt.sup.state(SID).ui if u.kind == "tool"]
            assert [u.output for u in tools] == [UI_INTERRUPTED, UI_INTERRUPTED]
            assert [r.result for r in await rt.results(SID)] == [INTERRUPTED_RESULT] * 2
