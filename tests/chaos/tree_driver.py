"""The driver of suite 3: plays one :class:`~tree_program.Program` against a real runtime.

One example is one ``trio.run``: a real :class:`Supervisor` over a real event log
(in memory under an autojump ``MockClock``, or SQLite under the real clock: its
writer thread would let a mock clock jump past a commit), agents played by the
real ``ScriptedModel``. The driver makes each op's call under ``trio.fail_after``,
journals it (``tree_journal.py``), lets the runtime settle at the end, checks the
live state, restarts a supervisor from the same log and compares, and hands the
log to the reference model (``tree_rules.check_example``).
"""

from __future__ import annotations

import copy
import faulthandler
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio
import trio.testing
from tree_bugs import classify
from tree_journal import DirectOp, Journal, Planned
from tree_live import check_live, check_restart, supervisor_tasks
from tree_model import Checks, Violation
from tree_program import (
    AGENTS,
    LIVE_TARGETS,
    PROFILES,
    ROOT_AGENTS,
    TARGET_RANGE,
    UNKNOWN_TARGETS,
    UNSAFE_IDS,
    Directive,
    Op,
    Program,
    agent_script,
)
from tree_rules import check_example

from halo_actors.agent.scripted import ScriptedCall, ScriptedModel
from halo_actors.core import ids
from halo_actors.core.errors import InvalidInput, SessionNotFound, SessionUnavailable
from halo_actors.core.events import Record, ToolCalled
from halo_actors.core.log import EventLog, MemoryEventLog, SqliteEventLog
from halo_actors.runtime.supervisor import Supervisor, open_supervisor
from halo_actors.tools.files import Workspace


@dataclass(frozen=True)
class Backend:
    name: str
    virtual: bool
    """Autojump MockClock (memory log) or the real clock (SQLite log)."""
    unit: float
    """Seconds one unit of scripted work or pause lasts."""
    budget: float
    """Seconds any one call, and the final settle, may take."""


MEMORY = Backend("memory", virtual=True, unit=1.0, budget=600.0)
SQLITE = Backend("sqlite", virtual=False, unit=0.004, budget=30.0)
FAULT_VERBS = ("interrupt", "stop", "archive", "delete")
FAULT_TOOLS = ("interrupt_session", "stop_session", "archive_session")


@dataclass
class Outcome:
    checks: int = 0
    faults: int = 0
    violations: list[Violation] = field(default_factory=list)
    """Violations no known bug explains: each one fails the example."""
    known: Counter[str] = field(default_factory=Counter)
    """Violations put down to each known bug (``tree_bugs.KNOWN_BUGS``)."""


WALL_LIMIT = 300.0
"""Real seconds after which a stuck example kills the process with every thread's stack:
a hang in a shielded wait would survive ``fail_after``, and must not hang ``make test``."""


def run_example(program: Program, backend: Backend, workspace: Path) -> Outcome:
    clock = trio.testing.MockClock(autojump_threshold=0) if backend.virtual else None
    faulthandler.dump_traceback_later(WALL_LIMIT, exit=True)
    try:
        return trio.run(play, program, backend, workspace, clock=clock)
    finally:
        faulthandler.cancel_dump_traceback_later()


async def play(program: Program, backend: Backend, workspace: Path) -> Outcome:
    journal, table = Journal(), dict[int, ScriptedCall]()
    model = ScriptedModel({}, fallback=agent_script(table, backend.unit))
    db = workspace / ".halo" / "events.db"
    log: EventLog = await SqliteEventLog.open(db) if backend.name == "sqlite" else MemoryEventLog()
    outcome, checks = Outcome(), Checks()
    try:
        async with open_supervisor(
            log, model, workspace=Workspace(workspace), profiles=PROFILES
        ) as sup:
            driver = Driver(sup, log, journal, table, backend)
            if not await driver.play_all(program, checks):
                outcome.checks, outcome.violations = checks.count, checks.violations
                return outcome
            live = {s.session_id: copy.deepcopy(s) for s in sup.sessions()}
            last_seq = log.last_seq
            await check_live(sup, log, journal, checks)
        checks.expect(log.last_seq == last_seq, "shutdown_wrote", "-", "after settling")
        if backend.name == "sqlite":
            await log.aclose()
            log = await SqliteEventLog.open(db)
        with trio.fail_after(backend.budget):
            await check_restart(log, model, workspace, PROFILES, live, checks)
        records = await log.read()
    finally:
        await log.aclose()
    mailboxes = {sid: len(state.mailbox) for sid, state in live.items()}
    tree = check_example(journal, records, mailboxes, checks)
    outcome.faults = _faults(journal, records)
    outcome.checks = checks.count
    outcome.violations, outcome.known = classify(tree, checks.violations)
    return outcome


def _faults(journal: Journal, records: list[Record]) -> int:
    """Stops, archives, deletes and hard interrupts issued, directly or by a tool call."""
    direct = sum(op.verb in FAULT_VERBS for op in journal.ops)
    called = {r.event.tool_use_id for r in records if isinstance(r.event, ToolCalled)}
    by_tools = sum(
        p.call_id in called and (p.tool in FAULT_TOOLS or p.arguments.get("interrupt") is True)
        for p in journal.planned.values()
    )
    return direct + by_tools


class Driver:
    def __init__(
        self,
        sup: Supervisor,
        log: EventLog,
        journal: Journal,
        table: dict[int, ScriptedCall],
        backend: Backend,
    ) -> None:
        self.sup, self.log, self.journal, self.table = sup, log, journal, table
        self.backend = backend

    async def play_all(self, program: Program, checks: Checks) -> bool:
        """Every op, then settle; False (with a ``hang`` violation) if a call never returned."""
        steps: list[tuple[str, Op | None]] = [
            ("root", Op("root", i, work=children)) for i, (_, children) in enumerate(program.trees)
        ]
        steps += [(op.verb, op) for op in program.ops]
        steps.append(("settle", None))
        for index, (verb, op) in enumerate(steps):
            try:
                with trio.fail_after(self.backend.budget):
                    await (self.settle() if op is None else self.play(op, program))
            except trio.TooSlowError:
                checks.expect(False, "hang", "-", f"step {index} ({verb}) did not return")
                return False
        return True

    async def play(self, op: Op, program: Program) -> None:
        match op.verb:
            case "pause":
                await trio.sleep(self.backend.unit * op.work)
            case "settle":
                await self.settle()
            case "root":
                await self.new_root(op, program)
            case "send" | "interrupt":
                target = self.target_of(op)
                text = self.message(target, op.directives, op.work)
                send = self.sup.interrupt if op.verb == "interrupt" else self.sup.send
                await self.direct(op.verb, target, lambda: send(target, text))
            case "start_child":
                target = self.target_of(op)
                agent, task = (
                    AGENTS[op.work % 2],
                    f"task work={op.work} {self.journal.tag_of(target)}",
                )
                await self.direct(
                    op.verb, target, lambda: self.sup.start_child(target, agent, task)
                )
            case _:
                target = self.target_of(op)
                await self.direct(op.verb, target, lambda: getattr(self.sup, op.verb)(target))

    async def new_root(self, op: Op, program: Program) -> None:
        """A root of the program's trees (with its first children), or one more root later."""
        first = op.target < len(program.trees) and len(self.journal.tags) == op.target
        agent, children = program.trees[op.target] if first else (ROOT_AGENTS[op.work % 2], 0)
        number = len(self.journal.tags)
        root = await self.sup.create_session(namespace=f"web_u{number % 2}", agent_id=agent)
        self.journal.tags[root] = f"[tree{number}]"
        self.journal.see([root])
        task = f"task work=1 {self.journal.tag_of(root)}"
        for _ in range(children):
            await self.direct(
                "start_child", root, partial(self.sup.start_child, root, "default", task)
            )

    async def direct(self, verb: str, target: str, call: Callable[[], Awaitable[object]]) -> None:
        start, created = self.log.last_seq, None
        try:
            result = await call()
        except InvalidInput:
            outcome = "invalid"
        except SessionNotFound:
            outcome = "not_found"
        except SessionUnavailable:
            outcome = "unavailable"
        else:
            if verb == "start_child":
                outcome, created = "created", str(result)
            else:
                outcome = str(result).lower()
        self.journal.ops.append(DirectOp(verb, target, start, self.log.last_seq, outcome, created))
        self.journal.see([s.session_id for s in self.sup.sessions()])

    async def settle(self) -> None:
        """Until no run, report or cascade is left: every session idle, no supervisor task."""
        while True:
            for state in self.sup.sessions():
                await self.sup.wait_idle(state.session_id)
            await trio.testing.wait_all_tasks_blocked()
            if not supervisor_tasks():
                return
            await trio.sleep(self.backend.unit)  # a task not tied to a run: let it finish

    # --- targets and messages ---------------------------------------------------

    def target_of(self, op: Op) -> str:
        unknown = op.target - (TARGET_RANGE - UNKNOWN_TARGETS)
        if unknown >= 0:
            roots = list(self.journal.tags)
            return (
                ids.child_id(roots[unknown % len(roots)], "ghost_000000"),
                "web_nobody_1700000000000_deadbeef",
                UNSAFE_IDS[unknown % len(UNSAFE_IDS)],
            )[unknown % 3]
        live = [s.session_id for s in self.sup.sessions() if s.lifecycle != "archived"]
        if op.verb in ("stop", "archive", "delete"):
            live = [s for s in live if not ids.is_root(s)]
        if op.target < LIVE_TARGETS and live:
            return live[op.target % len(live)]
        return self.journal.seen[op.target % len(self.journal.seen)]

    def message(self, target: str, directives: tuple[Directive, ...], work: int) -> str:
        words = []
        if ids.is_safe_session_id(target):
            for directive in directives:
                number = len(self.table)
                self.table[number] = self.plan(number, target, directive)
                words.append(f"do#{number}")
        return " ".join([*words, f"work={work}", self.journal.tag_of(target)])

    def plan(self, number: int, caller: str, directive: Directive) -> ScriptedCall:
        target = self.pick(caller, directive.relation, directive.index)
        tag, tool = self.journal.tag_of(caller), directive.tool
        arguments: dict[str, object] = {"session_id": target}
        if tool == "list_sessions":
            arguments = {}
        elif tool == "start_session":
            agent = AGENTS[directive.index % len(AGENTS)]
            arguments = {"task": f"task-{number} work=1 {tag}", "agent": agent, "label": "sub"}
        elif tool == "query_session":
            arguments |= {"message": f"ping-{number} {tag}", "interrupt": directive.flag}
        elif tool == "interrupt_session":
            arguments |= {"message": f"halt-{number} {tag}"}
        call_id = f"toolu_dir{number:04d}"
        aimed = target if "session_id" in arguments else None
        self.journal.planned[call_id] = Planned(
            call_id, caller, tool, aimed, arguments, directive.relation
        )
        return ScriptedCall(name=tool, input=arguments, id=call_id)

    def pick(self, caller: str, relation: str, index: int) -> str:
        seen = self.journal.seen
        tree = [s for s in seen if ids.same_tree(s, caller)]

        def choose(options: list[str], fallback: str) -> str:
            return options[index % len(options)] if options else fallback

        parent = ids.parent_of(caller)
        match relation:
            case "self":
                return caller
            case "parent":
                return parent or caller
            case "ancestor":
                return choose([s for s in tree if ids.is_self_or_ancestor(s, caller)], caller)
            case "child":
                return choose([s for s in tree if ids.parent_of(s) == caller], caller)
            case "descendant":
                return choose([s for s in tree if ids.is_in_subtree(s, caller)], caller)
            case "sibling":
                return choose([s for s in tree if parent and ids.parent_of(s) == parent], caller)
            case "tree":
                return choose(tree, caller)
            case "gone":
                live = {s.session_id for s in self.sup.sessions() if s.lifecycle != "archived"}
                return choose([s for s in tree if s not in live], choose(tree, caller))
            case "foreign":
                unknown = "web_nobody_1700000000000_deadbeef"
                return choose([s for s in seen if not ids.same_tree(s, caller)], unknown)
            case "unknown":
                return ids.child_id(choose(tree, caller), f"ghost_{index:06d}")
            case _:
                return UNSAFE_IDS[index % len(UNSAFE_IDS)]


__all__ = ["MEMORY", "SQLITE", "Backend", "Outcome", "run_example"]
