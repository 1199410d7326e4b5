"""Passivation: an idle session's state leaves memory and is rebuilt from the log when it
is next addressed; a restart recovers at once only the sessions with work left.

Every spec rule holds for passivated sessions as for resident ones: these tests run the
same operations with passivation off (``resident_idle=None``) and at its most eager
(``resident_idle=0``: every session at rest is passivated) and compare what the log and
the folded states say. SQLite tests use the real clock (its writer thread is invisible
to the autojump clock). See ``docs/design/passivation.md``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from runtime_harness import BUDGET, Rule, Step, call

from halo_actors.agent.scripted import Script, ScriptedModel
from halo_actors.core.conversation import TextBlock
from halo_actors.core.events import (
    AgentDone,
    AgentStarted,
    AssistantReplied,
    Event,
    MessageQueued,
    Record,
    RoundStarted,
    SessionCreated,
    TurnCompleted,
)
from halo_actors.core.log import EVERYTHING, EventFilter, EventLog, MemoryEventLog, SqliteEventLog
from halo_actors.core.state import SessionState, replay
from halo_actors.runtime.supervisor import Supervisor, open_supervisor
from halo_actors.tools.files import Workspace

ROOT = "cli_1700000000000_0badcafe"
A, B, C = f"{ROOT}>a_1", f"{ROOT}>a_1>b_1", f"{ROOT}>c_1"
RULES = (
    Rule(match="look", steps=(Step(calls=(call("list_sessions"),)), Step(text="looked"))),
    Rule(steps=(Step(text="ok"),)),
)


@asynccontextmanager
async def runtime(
    tmp_path: Path, log: EventLog, resident_idle: int | None = 0
) -> AsyncIterator[Supervisor]:
    model = ScriptedModel({"default": Script(rules=RULES)})
    async with open_supervisor(
        log, model, workspace=Workspace(tmp_path), resident_idle=resident_idle
    ) as sup:
        yield sup


async def passivate(sup: Supervisor, *session_ids: str) -> None:
    """Once the log is durable, passivate every session at rest (``resident_idle=0``)."""
    await sup.wait_all_idle()
    sup.registry.sweep()
    for sid in session_ids:
        assert sup.is_passivated(sid), sid


async def memory_log(tmp_path: Path) -> EventLog:
    return MemoryEventLog()


async def sqlite_log(tmp_path: Path) -> EventLog:
    return await SqliteEventLog.open(tmp_path / "log.db")


@pytest.fixture(params=["memory", "sqlite"])
async def log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventLog]:
    made = await (memory_log if request.param == "memory" else sqlite_log)(tmp_path)
    try:
        yield made
    finally:
        await made.aclose()


async def test_a_passivated_session_when_addressed_has_exactly_the_state_it_had(
    log: EventLog, tmp_path: Path
) -> None:
    with trio.fail_after(BUDGET):
        async with runtime(tmp_path, log) as sup:
            sid = await sup.create_session(ROOT)
            await sup.send(sid, "look around")
            await sup.wait_idle(sid)
            await sup.send(sid, "and again")
            await sup.wait_idle(sid)
            before = sup.state(sid)
            await passivate(sup, sid)
            assert sid not in sup.registry.resident
            after = await sup.load(sid)
            assert after is not before
            assert after == before
            assert after.last_output == "ok" and len(after.messages) == 6
            assert replay(sid, await log.read(EventFilter(session_id=sid))) == after


async def test_a_message_to_a_passivated_session_continues_its_conversation(
    log: EventLog, tmp_path: Path
) -> None:
    with trio.fail_after(BUDGET):
        async with runtime(tmp_path, log) as sup:
            sid = await sup.create_session(ROOT)
            await sup.send(sid, "look around")
            await sup.wait_idle(sid)
            await passivate(sup, sid)
            assert await sup.send(sid, "anything else?") == "started"
            await sup.wait_idle(sid)
            state = sup.state(sid)
            first = state.messages[0].content[0]
            last = state.messages[-2].content[0]
            assert isinstance(first, TextBlock) and isinstance(last, TextBlock)
            texts = [first.text, last.text]
            assert texts[0] == "look around" and texts[-1] == "anything else?"
            assert state.last_output == "ok"
            assert replay(sid, await log.read(EventFilter(session_id=sid))) == state


async def test_the_synchronous_accessors_rebuild_a_passivated_session(tmp_path: Path) -> None:
    log = await sqlite_log(tmp_path)
    try:
        with trio.fail_after(BUDGET):
            async with runtime(tmp_path, log) as sup:
                sid = await sup.create_session(ROOT, title="kept")
                await passivate(sup, sid)
                assert sup.exists(sid) and sup.is_live(sid) and not sup.is_running(sid)
                assert sup.roots() == [(sid, sup.registry.updated_ts(sid), "live")]
                assert sup.is_passivated(sid)  # none of the above rebuilt it
                assert sup.state(sid).title == "kept"  # this does, with a blocking read
                assert not sup.is_passivated(sid)
    finally:
        await log.aclose()


async def play_tree(sup: Supervisor) -> list[object]:
    """Create a tree, give every session a turn, then query, list, stop, archive and
    delete parts of it; returns what each step answered. With ``resident_idle=0`` every
    session is passivated between the steps."""
    answers: list[object] = []

    async def settle() -> None:
        await sup.wait_idle(ROOT)
        if sup.registry.resident_idle == 0:
            await passivate(sup, ROOT, A, B, C)

    await sup.create_session(ROOT)
    await sup.create_session(A, parent_id=ROOT)
    await sup.create_session(B, parent_id=A)
    await sup.create_session(C, parent_id=ROOT)
    for sid in (B, A, C, ROOT):
        answers.append(await sup.send(sid, f"hello {sid}"))
        await settle()
    answers.append(sup.describe_tree(ROOT))
    await settle()
    answers.append(await sup.send(A, "a query from the root", source=ROOT))  # query_session
    await settle()
    answers.append(await sup.interrupt_turn(B, "hard"))  # no turn to interrupt
    answers.append(await sup.stop(A))  # A and B passivated: nothing to stop, still stopped
    await settle()
    answers.append(await sup.send(B, "after the stop"))
    await settle()
    answers.append(await sup.archive(C))
    await settle()
    answers.append([sup.is_live(s) for s in (ROOT, A, B, C)])
    answers.append(await sup.delete(A))
    await sup.wait_idle(ROOT)
    if sup.registry.resident_idle == 0:
        await passivate(sup, ROOT, C)
    answers.append([sup.exists(s) for s in (ROOT, A, B, C)])
    answers.append(sup.describe_tree(ROOT))
    return answers


async def test_tree_operations_on_passivated_sessions_behave_as_for_resident_ones(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    logs: list[MemoryEventLog] = []
    answers: list[list[object]] = []
    states: list[dict[str, SessionState]] = []
    for resident_idle in (None, 0):
        log = MemoryEventLog()
        with trio.fail_after(BUDGET):
            async with runtime(tmp_path, log, resident_idle) as sup:
                answers.append(await play_tree(sup))
                states.append({s.session_id: s for s in sup.sessions()})
                if resident_idle == 0:
                    assert sup.registry.passivations > 10 and sup.registry.activations > 10
        logs.append(log)
    assert answers[0] == answers[1]
    assert states[0].keys() == states[1].keys() == {ROOT, C}
    for sid in (ROOT, C):
        assert _without_times(states[0][sid]) == _without_times(states[1][sid])
    resident, passivated = [[(r.seq, r.session_id, r.event) for r in await x.read()] for x in logs]
    assert resident == passivated  # the same records, in the same order, for every session


def _without_times(state: SessionState) -> SessionState:
    for entry in state.ui:
        entry.ts = 0
    state.created_ts = state.updated_ts = 0
    return state


SESSION_DONE: list[Event] = [
    SessionCreated(agent_id="default"),
    MessageQueued(text="hello"),
    RoundStarted(text="hello", drained=1),
    AgentStarted(),
    AssistantReplied(content=(TextBlock(text="hi"),)),
    TurnCompleted(),
    AgentDone(),
]
SESSION_MID_TURN = SESSION_DONE[:4]
SESSION_QUEUED: list[Event] = [
    SessionCreated(agent_id="default"),
    MessageQueued(text="are you there?"),
]


async def write(log: EventLog, session_id: str, events: list[Event]) -> None:
    for event in events:
        await log.append(session_id, event)


async def test_a_restart_recovers_at_once_exactly_the_sessions_with_open_turns_or_queued_messages(
    tmp_path: Path,
) -> None:
    done, mid_turn, queued = (
        f"cli_1700000000000_{n}" for n in ("d0d0d0d0", "e1e1e1e1", "f2f2f2f2")
    )
    child = f"{done}>child_1"
    log = await sqlite_log(tmp_path)
    await write(log, done, SESSION_DONE)
    await write(log, mid_turn, SESSION_MID_TURN)
    await write(log, queued, SESSION_QUEUED)
    await write(log, child, [SessionCreated(agent_id="default", parent_id=done)])
    await log.aclose()  # as a crash leaves it (every record durable)

    log = await sqlite_log(tmp_path)
    try:
        index = {s.session_id: s for s in await log.session_index()}
        assert {sid for sid, s in index.items() if s.needs_recovery} == {mid_turn, queued}
        with trio.fail_after(BUDGET):
            async with runtime(tmp_path, log, resident_idle=1_000) as sup:
                assert set(sup.registry.resident) == {mid_turn, queued}
                assert sup.is_passivated(done) and sup.is_passivated(child)
                assert sup.children(done) == [child]
                async with log.subscribe(EventFilter(session_id=queued)) as records:
                    async for record in records:  # answered without being asked
                        if isinstance(record.event, TurnCompleted):
                            break
                await sup.wait_all_idle()
                assert sup.state(queued).last_output == "ok"
                closed = sup.state(mid_turn)
                assert not closed.turn_open and "restarted" in closed.ui[-1].text
                assert sup.registry.activations == 0  # nobody addressed the others yet
                rebuilt = await sup.load(done)  # first address
                assert rebuilt == replay(done, await log.read(EventFilter(session_id=done)))
                assert rebuilt.last_output == "hi"
                assert [row["sessionId"] for row in sup.describe_tree(done)] == [done, child]
    finally:
        await log.aclose()


async def test_recover_tree_takes_over_one_tree_as_a_restart_does(tmp_path: Path) -> None:
    """What a node does when it takes a tree over (the tree was written elsewhere)."""
    other, waiting = "cli_1700000000000_a0a0a0a0", "cli_1700000000000_b1b1b1b1"
    log = MemoryEventLog()
    with trio.fail_after(BUDGET):
        async with runtime(tmp_path, log, resident_idle=1_000) as sup:
            await write(log, other, SESSION_DONE)  # appended by "another node"
            await write(log, waiting, SESSION_QUEUED)
            await write(log, f"{waiting}>kid_1", [SessionCreated(agent_id="default")])
            assert not sup.exists(waiting)
            assert await sup.recover_tree(waiting) == 1  # its queued message got a run
            assert not sup.exists(other)  # another tree: not taken over
            assert sup.is_passivated(f"{waiting}>kid_1")
            await sup.wait_idle(waiting)
            assert sup.state(waiting).last_output == "ok"
            assert await sup.recover_tree(waiting) == 0  # known already: nothing twice
            with pytest.raises(Exception, match="not the root"):
                await sup.recover_tree(f"{waiting}>kid_1")


class GatedReads(MemoryEventLog):
    """Async reads take their records, then wait for ``gate`` before returning them."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = trio.Event()
        self.gate.set()

    async def read(
        self,
        flt: EventFilter = EVERYTHING,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        records = await super().read(flt, after_seq=after_seq, until_seq=until_seq, limit=limit)
        await self.gate.wait()
        return records


async def test_a_rebuild_whose_read_raced_with_another_life_reads_the_session_again(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log = GatedReads()
    with trio.fail_after(BUDGET):
        async with runtime(tmp_path, log) as sup:
            sid = await sup.create_session(ROOT)
            await passivate(sup, sid)
            log.gate = trio.Event()
            loaded: list[SessionState] = []
            async with trio.open_nursery() as nursery:

                async def load() -> None:
                    loaded.append(await sup.load(sid))

                nursery.start_soon(load)
                await trio.testing.wait_all_tasks_blocked()  # its read holds the old records
                sup.state(sid)  # rebuilt meanwhile (a synchronous read), used, passivated
                await sup.send(sid, "meanwhile")
                await passivate(sup, sid)
                log.gate.set()
            (state,) = loaded
            assert state.last_output == "ok"  # not the records its first read had
            assert state == replay(sid, await log.read(EventFilter(session_id=sid)))
            assert sup.state(sid) is state
