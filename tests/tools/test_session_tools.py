"""The session tools and their tree-scoped gates (``docs/design/gates.md``).

Most tests call a tool directly, as a given session, through ``call_tool`` (the
same entry point the turn loop uses); the gate tests are repeated end to end,
with a scripted agent making the calls from inside its own turn. A real
supervisor and event log run underneath; "not touched" is checked on the log:
the target tree gets no new record.

Shell commands run for real (real clock); every test checks afterwards that no
process is left running in its workspace.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
import trio
import trio.testing
from proc_table import live_group_members, processes_in

from halo_actors.agent.scripted import Rule, Script, ScriptedCall, ScriptedModel, Step
from halo_actors.core import ids
from halo_actors.core.events import Event, RoundStarted, ToolCalled, ToolReturned, TurnCompleted
from halo_actors.core.log import EventFilter, MemoryEventLog
from halo_actors.runtime.profiles import AgentProfile, Limits, Profiles
from halo_actors.runtime.supervisor import Supervisor, open_supervisor
from halo_actors.tools.base import ToolContext, ToolOutput, call_tool
from halo_actors.tools.files import Workspace
from halo_actors.tools.registry import BUILTIN_TOOLS
from halo_actors.tools.shell import ShellLimits

BUDGET = 10.0  # real seconds any test may take before it is failed

BY_ID_TOOLS = (
    "query_session",
    "interrupt_session",
    "stop_session",
    "archive_session",
    "get_session_output",
)
UNKNOWN_FOREIGN_ROOT = "web_zz_1700000000000_deadbeef"

E = TypeVar("E", bound=Event)


# --- the scripted agent ----------------------------------------------------------


def _run_calls(found: re.Match[str]) -> tuple[Step, ...]:
    """``RUN [[tool, {args}], …]``: one model step per call, in order, then a short answer."""
    calls = json.loads(found[1])
    steps = [Step(calls=(ScriptedCall(name=name, input=args),)) for name, args in calls]
    return (*steps, Step(text="calls done"))


def _sleep_in_shell(found: re.Match[str]) -> tuple[Step, ...]:
    """``SLEEP <file>``: a long command that first writes its process-group id to ``file``."""
    command = f"echo $$ > {found[1]}; sleep 30"
    return (Step(calls=(ScriptedCall(name="shell_exec", input={"command": command}),)),)


RULES = (
    Rule(match=r"RUN (\[.*\])", build=_run_calls),
    Rule(match=r"SLEEP ([\w.-]+)", build=_sleep_in_shell),
    Rule(
        match=r"KICK",
        resumed=True,
        steps=(Step(calls=(ScriptedCall(name="continue_task"),)), Step(text="kick armed")),
    ),
    Rule(kind="resume", steps=(Step(text="resumed"),)),
    Rule(match=r"(secret-[\w-]+)", build=lambda found: (Step(text=f"out {found[1]}"),)),
    Rule(steps=(Step(text="ok"),)),
)

PROFILES = Profiles(
    {
        "default": AgentProfile(
            name="default", team=("default", "helper"), limits=Limits(kill_grace=0.5)
        ),
        "helper": AgentProfile(name="helper", team=()),
        "lead": AgentProfile(name="lead", team=("helper", "ghost")),
    }
)


def run_text(*calls: tuple[str, Mapping[str, object]]) -> str:
    return "RUN " + json.dumps([list(call) for call in calls])


def not_found(session_id: str) -> str:
    return '{"code":1,"error":"session ' + session_id + ' not found"}'


# --- the world: a supervisor, its log and a few trees -------------------------------


@dataclass
class World:
    sup: Supervisor
    log: MemoryEventLog
    root: Path

    async def tree(self, tag: str, *, namespace: str = "web_a") -> tuple[str, str, str]:
        """A root, its child and grandchild; each child's task is ``secret-<tag>…``."""
        root = await self.sup.create_session(namespace=namespace)
        child = await self.sup.start_child(root, "default", f"secret-{tag}-c", "child")
        grandchild = await self.sup.start_child(child, "default", f"secret-{tag}-g", "grand")
        await self.settle()
        return root, child, grandchild

    async def settle(self) -> None:
        """Until no run is active anywhere and none is about to start.

        ``wait_idle`` alone is not enough: a child's final report is sent after its
        run has ended, so the parent's next run may start a moment later.
        """
        while True:
            for state in self.sup.sessions():
                if ids.is_root(state.session_id):
                    await self.sup.wait_idle(state.session_id)
            await trio.testing.wait_all_tasks_blocked()
            if not any(self.sup.is_running(s.session_id) for s in self.sup.sessions()):
                return

    async def call(self, caller: str, tool: str, args: dict[str, object]) -> ToolOutput:
        ctx = ToolContext(
            session_id=caller,
            agent_id=self.sup.state(caller).agent_id,
            workspace=self.sup.workspace,
            tree=self.sup,
            turn=self.sup.actor(caller),
            shell=ShellLimits(kill_grace=0.5),
        )
        return await call_tool(BUILTIN_TOOLS, ctx, tool, args)

    async def seqs(self, session_id: str) -> list[int]:
        """Sequence numbers of every record of ``session_id``'s whole tree."""
        return [r.seq for r in await self.log.read(EventFilter(tree=session_id))]

    async def events(self, session_id: str, kind: type[E]) -> list[E]:
        records = await self.log.read(EventFilter(session_id=session_id))
        return [r.event for r in records if isinstance(r.event, kind)]

    async def wait_for(self, session_id: str, kind: type[E], text: str = "") -> E:
        """Until a record of ``kind`` whose repr contains ``text`` is in the log."""
        async with self.log.subscribe(EventFilter(session_id=session_id)) as records:
            async for record in records:
                if isinstance(record.event, kind) and text in repr(record.event):
                    return record.event
        raise AssertionError("the subscription ended")  # pragma: no cover

    async def busy_in_shell(self, session_id: str, name: str) -> int:
        """Make ``session_id`` run a long shell command; returns its process group id."""
        await self.sup.send(session_id, f"SLEEP {name}")
        pgid_file = self.root / name
        while not pgid_file.exists() or not pgid_file.read_text().strip():  # noqa: ASYNC110
            await trio.sleep(0.01)  # a file the command writes: nothing to wait on
        return int(pgid_file.read_text())


@asynccontextmanager
async def world(tmp_path: Path) -> AsyncIterator[World]:
    log = MemoryEventLog()
    model = ScriptedModel({}, fallback=Script(rules=RULES))
    workspace = Workspace(tmp_path)
    async with open_supervisor(log, model, workspace=workspace, profiles=PROFILES) as sup:
        yield World(sup, log, workspace.root)


@pytest.fixture(autouse=True)
def no_process_left_behind(tmp_path: Path) -> Iterator[None]:
    yield
    left = processes_in(tmp_path)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes still running in the workspace: {left}"


def args_for(tool: str, target: str) -> dict[str, object]:
    return (
        {"session_id": target, "message": "hi"}
        if tool == "query_session"
        else {"session_id": target}
    )


# --- gate: another tree reads exactly like an unknown id -----------------------------


@pytest.mark.parametrize("tool", BY_ID_TOOLS)
async def test_foreign_target_is_answered_byte_for_byte_like_an_unknown_id(
    tmp_path: Path, tool: str
) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            _, mine, _ = await w.tree("a")
            other_root, other_child, _ = await w.tree("b", namespace="web_b")
            before = await w.seqs(other_root)
            answers = {
                target: await w.call(mine, tool, args_for(tool, target))
                for target in (other_root, other_child)
            }
            unknown_here = ids.child_id(ids.root_of(mine), "ghost_000000")
            for unknown in (unknown_here, UNKNOWN_FOREIGN_ROOT):
                baseline = await w.call(mine, tool, args_for(tool, unknown))
                assert (baseline.text, baseline.is_error) == (not_found(unknown), True)
                for target, answer in answers.items():
                    assert answer.is_error
                    assert answer.text == not_found(target)
                    assert answer.text.replace(target, unknown) == baseline.text
            await w.settle()
            assert await w.seqs(other_root) == before
            assert {w.sup.state(s).lifecycle for s in (other_root, other_child)} == {"live"}


async def test_gates_leave_a_busy_foreign_session_running(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            mine, _, _ = await w.tree("a")
            _, other_child, _ = await w.tree("b", namespace="web_b")
            pgid = await w.busy_in_shell(other_child, "foreign.pgid")
            before = await w.seqs(other_child)
            for tool in BY_ID_TOOLS:
                answer = await w.call(mine, tool, args_for(tool, other_child))
                assert answer.text == not_found(other_child)
            await trio.testing.wait_all_tasks_blocked()
            assert await w.seqs(other_child) == before
            assert w.sup.is_running(other_child)
            assert live_group_members(pgid)
            assert not w.sup.state(other_child).interrupt_requested
            await w.sup.stop(other_child)  # the authorised path, as the HTTP front would
            assert live_group_members(pgid) == []


async def test_archived_session_of_the_own_tree_reads_as_not_found(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, grandchild = await w.tree("a")
            await w.sup.archive(child)
            for tool in BY_ID_TOOLS:
                answer = await w.call(root, tool, args_for(tool, grandchild))
                assert (answer.text, answer.is_error) == (not_found(grandchild), True)


async def test_scripted_agent_cannot_reach_a_foreign_tree(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            mine, _, _ = await w.tree("a")
            other_root, other_child, _ = await w.tree("b", namespace="web_b")
            before = await w.seqs(other_root)
            calls = [(tool, args_for(tool, other_child)) for tool in BY_ID_TOOLS]
            await w.sup.send(mine, run_text(*calls, ("list_sessions", {})))
            await w.settle()
            results = await w.events(mine, ToolReturned)
            by_id, listed = results[:-1], results[-1]
            assert [r.tool_name for r in by_id] == list(BY_ID_TOOLS)
            assert all(r.result == not_found(other_child) and r.is_error for r in by_id)
            assert other_root not in listed.result and "secret-b" not in listed.result
            assert await w.seqs(other_root) == before


# --- gate: stop/archive refuse self and ancestors; interrupt allows them ----------------


@pytest.mark.parametrize("tool", ["stop_session", "archive_session"])
async def test_stop_and_archive_refuse_the_own_session(tmp_path: Path, tool: str) -> None:
    verb = tool.removesuffix("_session")
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, _ = await w.tree("a")
            before = await w.seqs(root)
            answer = await w.call(child, tool, {"session_id": child})
            assert answer.is_error
            assert json.loads(answer.text) == {
                "code": 1,
                "error": f"cannot {verb} your own session ({child}): "
                "it would wait for this very turn",
            }
            assert await w.seqs(root) == before


@pytest.mark.parametrize("tool", ["stop_session", "archive_session"])
async def test_stop_and_archive_refuse_every_ancestor(tmp_path: Path, tool: str) -> None:
    verb = tool.removesuffix("_session")
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, grandchild = await w.tree("a")
            before = await w.seqs(root)
            for ancestor in (child, root):
                answer = await w.call(grandchild, tool, {"session_id": ancestor})
                assert answer.is_error
                assert json.loads(answer.text)["error"] == (
                    f"cannot {verb} an ancestor of your session ({ancestor}): "
                    "it would wait for this very turn"
                )
            assert await w.seqs(root) == before


async def test_stop_and_archive_of_own_line_from_a_running_turn_are_refused_without_hanging(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, grandchild = await w.tree("a")
            calls = [
                (tool, {"session_id": target})
                for tool in ("stop_session", "archive_session")
                for target in (grandchild, child, root)
            ]
            await w.sup.send(grandchild, run_text(*calls))
            await w.settle()
            results = await w.events(grandchild, ToolReturned)
            assert len(results) == len(calls)
            for result in results:
                assert result.is_error
                assert json.loads(result.result)["error"].startswith(
                    ("cannot stop ", "cannot archive ")
                )
            assert {w.sup.state(s).lifecycle for s in (root, child, grandchild)} == {"live"}
            assert (await w.events(grandchild, TurnCompleted))[-1].stop_reason == "end_turn"


async def test_interrupt_session_on_self_and_on_ancestors_is_allowed(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, grandchild = await w.tree("a")
            for target in (grandchild, child, root):
                answer = await w.call(grandchild, "interrupt_session", {"session_id": target})
                await w.settle()
                assert not answer.is_error
                assert json.loads(answer.text) == {
                    "code": 0,
                    "sessionId": target,
                    "status": "started",  # idle: the message starts a run
                }
            await w.settle()
            assert {w.sup.state(s).lifecycle for s in (root, child, grandchild)} == {"live"}


async def test_interrupting_the_own_session_from_its_turn_cuts_it_and_drains_the_message(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, _, _ = await w.tree("a")
            call = ("interrupt_session", {"session_id": root, "message": "read this"})
            await w.sup.send(root, run_text(call))
            await w.settle()
            completes = await w.events(root, TurnCompleted)
            rounds = await w.events(root, RoundStarted)
            assert completes[-2].stop_reason == "interrupted"
            assert rounds[-1].text == f"(from: session {root}) read this"
            assert completes[-1].stop_reason == "end_turn"


async def test_a_child_interrupting_its_busy_parent_cuts_the_parent_turn(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, _ = await w.tree("a")
            pgid = await w.busy_in_shell(root, "root.pgid")
            await w.sup.send(child, run_text(("interrupt_session", {"session_id": root})))
            await w.settle()
            assert live_group_members(pgid) == []
            assert "interrupted" in [c.stop_reason for c in await w.events(root, TurnCompleted)]
            [result] = await w.events(child, ToolReturned)
            assert json.loads(result.result) == {"code": 0, "sessionId": root, "status": "queued"}


# --- stop and archive inside the own subtree ----------------------------------------


async def test_stop_session_stops_a_busy_child_and_kills_its_command(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, grandchild = await w.tree("a")
            pgid = await w.busy_in_shell(child, "child.pgid")
            answer = await w.call(root, "stop_session", {"session_id": child})
            assert json.loads(answer.text) == {"code": 0, "sessionId": child, "stopped": True}
            assert live_group_members(pgid) == []
            assert w.sup.state(child).lifecycle == "stopped"
            assert w.sup.state(grandchild).lifecycle == "stopped"
            assert w.sup.state(root).lifecycle == "live"


async def test_archive_session_archives_the_subtree_and_hides_it(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, grandchild = await w.tree("a")
            answer = await w.call(root, "archive_session", {"session_id": child})
            assert json.loads(answer.text) == {"code": 0, "sessionId": child, "archived": True}
            assert {w.sup.state(s).lifecycle for s in (child, grandchild)} == {"archived"}
            listed = json.loads((await w.call(root, "list_sessions", {})).text)
            assert [s["sessionId"] for s in listed["sessions"]] == [root]


# --- start_session: only the caller's team ---------------------------------------------


async def test_start_session_starts_a_team_member_that_appears_in_list_sessions(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root = await w.sup.create_session(namespace="web_a")
            answer = await w.call(
                root, "start_session", {"task": "secret-new", "agent": "helper", "label": "h"}
            )
            started = json.loads(answer.text)
            assert (started["code"], started["status"]) == (0, "started")
            new = started["sessionId"]
            assert ids.parent_of(new) == root
            await w.settle()
            listed = json.loads((await w.call(root, "list_sessions", {})).text)["sessions"]
            assert [(s["sessionId"], s["agentId"]) for s in listed] == [
                (root, "default"),
                (new, "helper"),
            ]
            assert w.sup.output(new) == "out secret-new"


@pytest.mark.parametrize(
    ("caller_agent", "agent", "error"),
    [
        ("default", "lead", "agent profile 'lead' is not in your team"),
        ("default", "nobody", "agent profile 'nobody' is not in your team"),
        ("helper", "default", "agent profile 'default' is not in your team"),
        ("helper", "helper", "agent profile 'helper' is not in your team"),
        ("lead", "default", "agent profile 'default' is not in your team"),
    ],
)
async def test_start_session_refuses_a_profile_outside_the_team(
    tmp_path: Path, caller_agent: str, agent: str, error: str
) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root = await w.sup.create_session(namespace="web_a", agent_id=caller_agent)
            before = await w.seqs(root)
            answer = await w.call(root, "start_session", {"task": "work", "agent": agent})
            assert answer.is_error
            assert json.loads(answer.text) == {"code": 1, "error": error}
            assert w.sup.children(root) == []
            assert await w.seqs(root) == before


async def test_start_session_of_a_team_member_without_a_profile_is_a_clear_error(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root = await w.sup.create_session(namespace="web_a", agent_id="lead")
            before = await w.seqs(root)
            answer = await w.call(root, "start_session", {"task": "work", "agent": "ghost"})
            known = ", ".join(w.sup.profiles.names())
            expected = f"unknown agent profile 'ghost'; known: {known}"
            assert (answer.text, answer.is_error) == (expected, True)
            assert w.sup.children(root) == []
            assert await w.seqs(root) == before


async def test_start_session_refuses_an_empty_task(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root = await w.sup.create_session(namespace="web_a")
            answer = await w.call(root, "start_session", {"task": "  \n"})
            assert json.loads(answer.text) == {"code": 1, "error": "task is empty"}
            assert w.sup.children(root) == []


async def test_scripted_agent_starts_a_child_that_reports_back(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root = await w.sup.create_session(namespace="web_a")
            await w.sup.send(root, run_text(("start_session", {"task": "secret-x"})))
            await w.settle()
            [child] = w.sup.children(root)
            [result] = await w.events(root, ToolReturned)
            assert json.loads(result.result) == {
                "code": 0,
                "sessionId": child,
                "status": "started",
            }
            assert "out secret-x" in (await w.events(root, RoundStarted))[-1].text


# --- query_session ---------------------------------------------------------------------


async def test_query_session_refuses_the_own_session(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, _ = await w.tree("a")
            before = await w.seqs(root)
            answer = await w.call(child, "query_session", {"session_id": child, "message": "hi"})
            assert answer.is_error
            assert json.loads(answer.text) == {
                "code": 1,
                "error": "cannot query your own session",
            }
            assert await w.seqs(root) == before


async def test_query_to_an_idle_session_starts_a_run_with_the_message(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, _ = await w.tree("a")
            answer = await w.call(
                root, "query_session", {"session_id": child, "message": "secret-q"}
            )
            assert json.loads(answer.text) == {"code": 0, "sessionId": child, "status": "started"}
            await w.settle()
            assert (await w.events(child, RoundStarted))[-1].text == (
                f"(from: session {root}) secret-q"
            )
            assert w.sup.output(child) == "out secret-q"


async def test_query_with_interrupt_cuts_the_target_turn_at_once(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, _ = await w.tree("a")
            pgid = await w.busy_in_shell(child, "child.pgid")
            answer = await w.call(
                root, "query_session", {"session_id": child, "message": "now", "interrupt": True}
            )
            assert json.loads(answer.text) == {"code": 0, "sessionId": child, "status": "queued"}
            cut = await w.wait_for(child, TurnCompleted, "interrupted")
            assert cut.stop_reason == "interrupted"
            assert live_group_members(pgid) == []
            shell_result = (await w.events(child, ToolReturned))[-1]
            assert shell_result.is_error and "[exit code" not in shell_result.result
            await w.settle()
            assert (await w.events(child, RoundStarted))[-1].text == f"(from: session {root}) now"


async def test_query_without_interrupt_lets_the_running_command_finish(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, _ = await w.tree("a")
            shell = ("shell_exec", {"command": "sleep 0.3; echo finished"})
            await w.sup.send(child, run_text(shell))
            await w.wait_for(child, ToolCalled, "shell_exec")
            answer = await w.call(root, "query_session", {"session_id": child, "message": "hey"})
            assert json.loads(answer.text)["status"] == "queued"
            await w.settle()
            shell_result = next(
                r for r in await w.events(child, ToolReturned) if r.tool_name == "shell_exec"
            )
            assert shell_result.result == "finished\n[exit code 0]"


# --- reading: get_session_output and list_sessions ------------------------------------------


async def test_get_session_output_returns_the_targets_last_output(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, grandchild = await w.tree("a")
            await w.sup.send(child, "secret-fresh")
            await w.settle()
            for caller, target, output in (
                (root, grandchild, "out secret-a-g"),
                (grandchild, child, "out secret-fresh"),
                (child, child, "out secret-fresh"),
            ):
                answer = await w.call(caller, "get_session_output", {"session_id": target})
                assert json.loads(answer.text) == {
                    "code": 0,
                    "sessionId": target,
                    "output": output,
                }


async def test_list_sessions_lists_only_the_callers_tree(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            mine = await w.tree("a")
            other = await w.tree("b", namespace="web_b")
            for caller in mine:
                answer = await w.call(caller, "list_sessions", {})
                listed = json.loads(answer.text)
                assert listed["code"] == 0
                assert [s["sessionId"] for s in listed["sessions"]] == list(mine)
                assert [s["parentId"] for s in listed["sessions"]] == [None, mine[0], mine[1]]
                assert not any(foreign in answer.text for foreign in other)


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "unsafe",
    [
        "",
        "../../etc/passwd",
        "web a",
        "web_a>",
        ">web_a",
        "web_a>..",
        "web_a;DROP TABLE events",
        "x" * 200,
        "web_a\x00",
        "wéb",
    ],
)
async def test_unsafe_ids_are_refused_and_touch_nothing(tmp_path: Path, unsafe: str) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root, child, _ = await w.tree("a")
            unsafe = unsafe.replace("web_a", root)
            last = w.log.last_seq
            for tool in BY_ID_TOOLS:
                answer = await w.call(child, tool, args_for(tool, unsafe))
                assert answer.is_error
                assert json.loads(answer.text) == {
                    "code": 1,
                    "error": f"session {unsafe} not found",
                }
            await trio.testing.wait_all_tasks_blocked()
            assert w.log.last_seq == last


@pytest.mark.parametrize(
    ("tool", "args", "problem"),
    [
        ("stop_session", {}, "Object missing required field `session_id`"),
        ("archive_session", {"session_id": 7}, "Expected `str`, got `int` - at `$.session_id`"),
        ("query_session", {"session_id": "x"}, "Object missing required field `message`"),
        (
            "query_session",
            {"session_id": "x", "message": "m", "interrupt": "yes"},
            "Expected `bool`, got `str` - at `$.interrupt`",
        ),
        (
            "interrupt_session",
            {"session_id": "x", "force": True},
            "Object contains unknown field `force`",
        ),
        (
            "get_session_output",
            {"session_id": None},
            "Expected `str`, got `null` - at `$.session_id`",
        ),
        ("list_sessions", {"tree": "all"}, "Object contains unknown field `tree`"),
        ("start_session", {"agent": "default"}, "Object missing required field `task`"),
        ("start_session", {"task": ["a"]}, "Expected `str`, got `array` - at `$.task`"),
        ("continue_task", {"now": True}, "Object contains unknown field `now`"),
    ],
)
async def test_invalid_arguments_are_a_clear_error_and_change_nothing(
    tmp_path: Path, tool: str, args: dict[str, object], problem: str
) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            _, child, _ = await w.tree("a")
            last = w.log.last_seq
            answer = await w.call(child, tool, args)
            assert (answer.text, answer.is_error) == (
                f"invalid arguments for {tool}: {problem}",
                True,
            )
            assert w.log.last_seq == last


# --- continue_task -----------------------------------------------------------------------


async def test_continue_task_answers_not_interrupted_outside_a_resumed_round(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root = await w.sup.create_session(namespace="web_a")
            await w.sup.send(root, run_text(("continue_task", {})))  # an opening turn
            await w.settle()
            await w.sup.send(root, run_text(("continue_task", {})))  # a second opening turn
            await w.settle()
            results = await w.events(root, ToolReturned)
            assert [r.result for r in results] == ["not_interrupted", "not_interrupted"]
            assert [r.kind for r in await w.events(root, RoundStarted)] == ["opening", "opening"]
            direct = await w.call(root, "continue_task", {})
            assert (direct.text, direct.is_error) == ("no_turn", False)


async def test_continue_task_in_a_round_resumed_after_an_interrupt_arms_one_kick(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BUDGET):
        async with world(tmp_path) as w:
            root = await w.sup.create_session(namespace="web_a")
            pgid = await w.busy_in_shell(root, "root.pgid")
            await w.sup.send(root, "KICK", mode="hard")
            await w.settle()
            assert live_group_members(pgid) == []
            rounds = await w.events(root, RoundStarted)
            assert [(r.kind, r.resumed_after_interrupt) for r in rounds] == [
                ("opening", False),
                ("drained", True),
                ("resume", False),
            ]
            kick = (await w.events(root, ToolReturned))[-1]
            assert kick.result == "ok: the task resumes in a new turn once this one ends"
            assert w.sup.output(root) == "resumed"
