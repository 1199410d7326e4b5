"""The seeded abort driver of chaos suite 1: random trees, faults at random await points.

One run (:func:`play`) opens a real supervisor (in-memory or SQLite log) whose
agents follow :data:`RULES`: parallel tool batches of real short shell commands
and session tools, children that report back, ``continue_task`` after an
interrupt. A seeded plan of faults — user messages, hard interrupts, stops,
archives, and session tools called *from inside* sessions on random targets —
fires at planned **scheduler steps**: a trio instrument counts task steps and
starts the next fault the moment its step is reached, so a fault can land
between any two await points of a turn, a tool or a cascade, without hooks in
the product code.

After the run settles, :func:`check_invariants` checks what the runtime
promises (see ``docs/reliability.md``). Timing is real (shell commands), so a
seed fixes the trees, the scripts and the fault plan; the interleaving around
them may vary slightly from one rerun to the next.
"""

from __future__ import annotations

import random
import re
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from halo_actors.agent.model import estimate_tokens
from halo_actors.agent.scripted import Rule, Script, ScriptedCall, ScriptedModel, Step
from halo_actors.core.conversation import ToolResultBlock
from halo_actors.core.errors import SessionNotFound, SessionUnavailable
from halo_actors.core.events import (
    Event,
    FlagsChanged,
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
    Record,
    RoundStarted,
    SessionArchived,
    SessionStopped,
    ToolCalled,
    ToolReturned,
)
from halo_actors.core.log import EventLog, MemoryEventLog, SqliteEventLog
from halo_actors.core.state import SessionState, replay
from halo_actors.runtime.session import Mode
from halo_actors.runtime.supervisor import Supervisor, open_supervisor
from halo_actors.tools.files import Workspace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import trio.lowlevel
from runtime_harness import processes_in

FAULT_BUDGET = 30.0
"""Seconds (real) one fault may take before the run is failed as a hang."""

RUN_BUDGET = 90.0
"""Seconds (real) one whole run may take."""


def call(name: str, **inputs: object) -> ScriptedCall:
    return ScriptedCall(name=name, input=dict(inputs))


def shell(command: str) -> ScriptedCall:
    return call("shell_exec", command=command)


SESSION_TOOLS = {
    "poke": "interrupt_session",
    "halt": "stop_session",
    "shelve": "archive_session",
    "peek": "get_session_output",
    "ask": "query_session",
}


def _session_tool(found: re.Match[str]) -> tuple[Step, ...]:
    tool, target = SESSION_TOOLS[found[1]], found[2]
    inputs: dict[str, object] = {"session_id": target}
    if tool in ("query_session", "interrupt_session"):
        inputs["message"] = "work 1"
    return (Step(calls=(call(tool, **inputs), call("list_sessions"))), Step(text="tool done"))


def _work(found: re.Match[str]) -> tuple[Step, ...]:
    n = int(found[1])
    batch = (shell(f"sleep 0.0{n}; echo a"), shell("echo b"), call("list_sessions"))
    return (
        Step(text="working on it", chunk=4, delay=0.002, calls=batch),
        Step(text="work done", chunk=3, delay=0.002),
    )


def _spawn(found: re.Match[str]) -> tuple[Step, ...]:
    starts = tuple(call("start_session", task="work 1") for _ in range(int(found[1])))
    return (Step(calls=starts), Step(text="spawned", delay=0.01))


RULES = (
    Rule(
        match=r"^\[resume\]",
        steps=(
            Step(text="resuming", chunk=3, delay=0.002, calls=(shell("echo resumed"),)),
            Step(text="resume done"),
        ),
    ),
    Rule(
        resumed=True,
        steps=(
            Step(text="interrupted; continuing", calls=(call("continue_task"), shell("echo x"))),
            Step(text="ok"),
        ),
    ),
    Rule(match=r"(poke|halt|shelve|peek|ask) (\S+)", build=_session_tool),
    Rule(match=r"spawn (\d)", build=_spawn),
    Rule(match=r"work (\d)", build=_work),
    Rule(steps=(Step(text="noted"),)),
)

FAULT_KINDS = ("message", "hard", "stop", "archive", "tool", "spawn")
FAULT_WEIGHTS = (5, 4, 3, 1, 4, 2)


@dataclass(frozen=True)
class Fault:
    at_step: int
    """Scheduler steps after the run began when this fault starts."""
    kind: str
    target: int
    """Index into the sorted live sessions at firing time."""
    other: int
    detail: int


@dataclass
class Outcome:
    seed: int
    faults_fired: int = 0
    checks: int = 0
    sent: Counter[str] = field(default_factory=Counter)
    """Messages the driver saw accepted, per session."""


def plan(rng: random.Random, faults: int, horizon: int) -> list[Fault]:
    steps = sorted(rng.randrange(horizon) for _ in range(faults))
    return [
        Fault(
            at_step=at,
            kind=rng.choices(FAULT_KINDS, FAULT_WEIGHTS)[0],
            target=rng.randrange(1 << 16),
            other=rng.randrange(1 << 16),
            detail=rng.randrange(1, 4),
        )
        for at in steps
    ]


class FaultTrigger(trio.abc.Instrument):
    """Counts scheduler steps and starts each planned fault when its step is reached."""

    def __init__(
        self, faults: list[Fault], fire: trio.Nursery, run: Callable[[Fault], Awaitable[None]]
    ) -> None:
        self.pending = list(faults)
        self.steps = 0
        self._nursery = fire
        self._run = run

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1
        while self.pending and self.pending[0].at_step <= self.steps:
            self._nursery.start_soon(self._run, self.pending.pop(0))


async def play(seed: int, workspace: Path, *, sqlite: bool, faults: int) -> Outcome:
    """One seeded run; raises AssertionError (naming the seed) if an invariant breaks."""
    rng = random.Random(seed)
    outcome = Outcome(seed)
    model = ScriptedModel({"default": Script(rules=RULES)})
    db = workspace / ".halo" / "events.db"
    log: EventLog = await SqliteEventLog.open(db) if sqlite else MemoryEventLog()
    live: dict[str, SessionState] = {}
    try:
        with trio.fail_after(RUN_BUDGET):
            async with open_supervisor(log, model, workspace=Workspace(workspace)) as sup:
                roots = [
                    await sup.create_session(namespace=f"t{i}") for i in range(rng.randint(1, 3))
                ]

                async def fire(fault: Fault) -> None:
                    with trio.fail_after(FAULT_BUDGET):
                        await _fire(sup, fault, outcome)
                    outcome.faults_fired += 1

                async with trio.open_nursery() as nursery:
                    trigger = FaultTrigger(plan(rng, faults, 300 + 80 * faults), nursery, fire)
                    trio.lowlevel.add_instrument(trigger)
                    try:
                        for root in roots:
                            await _accepted(sup, outcome, root, f"spawn {rng.randint(1, 3)}")
                        while trigger.pending:  # a quiet system takes no steps: fire the rest
                            await _settle(sup)
                            if trigger.pending:
                                trigger.steps = max(trigger.steps, trigger.pending[0].at_step)
                            await trio.lowlevel.checkpoint()
                    finally:
                        trio.lowlevel.remove_instrument(trigger)
                await _settle(sup)
                check_invariants(sup, await log.read(), outcome)
                live = {s.session_id: s for s in sup.sessions()}
        if sqlite:
            await log.aclose()
            log = await SqliteEventLog.open(db)
            await _check_restart(log, model, workspace, live, outcome)
        left = processes_in(workspace)
        outcome.checks += 1
        assert not left, f"processes left behind: {left}"
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}: {exc}") from exc
    except BaseExceptionGroup as group:  # raised inside the supervisor's nursery
        failed, _rest = group.split(AssertionError)
        if failed is None:
            raise
        first = _leaves(failed)[0]
        raise AssertionError(f"seed {seed}: {first}") from group
    except trio.TooSlowError as exc:
        raise AssertionError(f"seed {seed}: a fault or the run hung") from exc
    finally:
        await log.aclose()
    return outcome


def _leaves(group: BaseException) -> list[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for inner in group.exceptions for leaf in _leaves(inner)]
    return [group]


async def _settle(sup: Supervisor) -> None:
    await sup.wait_all_idle()


def _pick(sup: Supervisor, index: int) -> str:
    ids = sorted(s.session_id for s in sup.sessions() if s.lifecycle != "deleted")
    return ids[index % len(ids)]


async def _accepted(
    sup: Supervisor, outcome: Outcome, target: str, text: str, mode: Mode = "soft"
) -> None:
    try:
        await sup.send(target, text, mode=mode)
    except (SessionUnavailable, SessionNotFound):
        return  # archived or deleted meanwhile: refused, nothing queued
    outcome.sent[target] += 1


async def _fire(sup: Supervisor, fault: Fault, outcome: Outcome) -> None:
    target, other = _pick(sup, fault.target), _pick(sup, fault.other)
    match fault.kind:
        case "message":
            await _accepted(sup, outcome, target, f"work {fault.detail}")
        case "hard":
            await _accepted(sup, outcome, target, f"work {fault.detail}", mode="hard")
        case "spawn":
            await _accepted(sup, outcome, target, f"spawn {fault.detail}")
        case "tool":
            verb = sorted(SESSION_TOOLS)[fault.detail % len(SESSION_TOOLS)]
            await _accepted(sup, outcome, target, f"{verb} {other}")
        case "stop":
            await sup.stop(target)
        case "archive":
            await sup.archive(target)


# --- invariants -------------------------------------------------------------------------


def check_invariants(sup: Supervisor, records: list[Record], outcome: Outcome) -> None:
    by_session: dict[str, list[Record]] = {}
    for record in records:
        by_session.setdefault(record.session_id, []).append(record)

    def check(condition: bool, message: str) -> None:
        outcome.checks += 1
        assert condition, message

    for state in sup.sessions():
        sid = state.session_id
        mine = by_session.get(sid, [])
        events = [r.event for r in mine]
        # every message sent is answered, still queued, folded or discarded: never lost
        queued = sum(isinstance(e, MessageQueued) for e in events)
        accounted = (
            sum(e.drained for e in events if isinstance(e, RoundStarted))
            + sum(e.count for e in events if isinstance(e, MailboxFolded | MailboxDiscarded))
            + len(state.mailbox)
        )
        check(
            queued == accounted,
            f"{sid}: {queued} messages queued, {accounted} accounted for\n"
            + "\n".join(f"  {r.seq} {r.event}"[:160] for r in mine),
        )
        check(queued >= outcome.sent[sid], f"{sid}: an accepted message was never logged")
        # every tool call has exactly one result, in the log and in the conversation
        called = Counter(e.tool_use_id for e in events if isinstance(e, ToolCalled))
        returned = Counter(e.tool_use_id for e in events if isinstance(e, ToolReturned))
        check(called == returned, f"{sid}: tool calls {called} vs results {returned}")
        results = Counter(
            b.tool_use_id
            for m in state.messages
            for b in m.content
            if isinstance(b, ToolResultBlock)
        )
        uses = Counter(u.id for m in state.messages for u in m.tool_uses())
        check(uses == results, f"{sid}: conversation has unanswered or doubled tool calls")
        # kicks ≤ interrupts
        kicks = sum(isinstance(e, FlagsChanged) and e.self_kick is True for e in events)
        asks = sum(isinstance(e, FlagsChanged) and e.interrupt_requested is True for e in events)
        check(kicks <= asks, f"{sid}: {kicks} kicks armed for {asks} interrupts")
        # no resurrection: nothing after an archive; after a stop, only rounds of new messages
        _check_no_resurrection(sid, events, check)
        # every turn ended
        check(not state.turn_open and not sup.is_running(sid), f"{sid}: a turn is still open")
        # the log rebuilds the live state
        check(replay(sid, mine) == state, f"{sid}: state rebuilt from the log differs")
        check(
            state.estimated_tokens == estimate_tokens(state.messages),
            f"{sid}: the running size estimate drifted",
        )


def _check_no_resurrection(
    sid: str, events: Sequence[Event], check: Callable[[bool, str], None]
) -> None:
    archived = False
    stopped = False
    for event in events:
        if isinstance(event, SessionArchived):
            archived = True
        elif isinstance(event, SessionStopped):
            stopped = True
        elif isinstance(event, RoundStarted):
            check(not archived, f"{sid}: a round started after the archive")
            if stopped:
                check(event.drained > 0, f"{sid}: a {event.kind} round resurrected a stop")
                stopped = False


async def _check_restart(
    log: EventLog,
    model: ScriptedModel,
    workspace: Path,
    live: dict[str, SessionState],
    outcome: Outcome,
) -> None:
    async with open_supervisor(log, model, workspace=Workspace(workspace)) as sup:
        rebuilt = {s.session_id: s for s in sup.sessions()}
        outcome.checks += 1
        assert rebuilt == live, "a restart rebuilt different sessions than the live ones"
