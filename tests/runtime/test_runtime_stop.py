"""Stop preserves the mailbox (one folded user turn), cascades, and waits for every turn."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing
from runtime_harness import (
    ANSWER_ANYTHING,
    BUDGET,
    SHELL_BUDGET,
    Rule,
    Runtime,
    Script,
    SlowCompactionModel,
    Step,
    assert_every_tool_use_answered_once,
    call,
    live_group_members,
    poll_until,
    profiles_with,
    read_pid,
    running,
    shell,
)

from halo_actors.agent.repair import INTERRUPTED_RESULT, STREAM_CUT_MARKER
from halo_actors.core.conversation import TextBlock, ToolResultBlock, ToolUseBlock, user_text
from halo_actors.core.events import (
    AgentStarted,
    AssistantReplied,
    Compacted,
    Event,
    FlagsChanged,
    MailboxFolded,
    MessageQueued,
    Record,
    ReportSent,
    RoundStarted,
    SessionCreated,
    SessionStopped,
    TextStreamed,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
    kind_of,
)
from halo_actors.core.log import EventFilter
from halo_actors.core.state import SessionState, replay
from halo_actors.fronts.http.history import HISTORY_KINDS, HistoryFold

LONG = Rule(match=r"^long", steps=(Step(text="long work", delay=5),))
SPAWN = Rule(
    match=r"^spawn",
    steps=(
        Step(calls=(call("start_session", task="child task"),)),
        Step(text="waiting for my child", delay=5),
    ),
)
CHILD = Rule(match=r"child task", steps=(Step(text="child working", delay=5),))


def fold(session_id: str, *events: Event) -> SessionState:
    """The state a session has after exactly ``events`` (hand-written records)."""
    records = [Record(seq=i, session_id=session_id, ts=i, event=e) for i, e in enumerate(events, 1)]
    return replay(session_id, records)


async def test_stop_folds_whole_mailbox_into_history_as_one_user_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, LONG, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            other = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long task")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(sid, "a person's note")
            await rt.sup.send(sid, "a session's note", source=other)
            assert await rt.sup.stop(sid) is True

            folded = f"a person's note\n\n(from: session {other}) a session's note"
            assert await rt.events(sid, MailboxFolded) == [MailboxFolded(text=folded, count=2)]
            state = rt.sup.state(sid)
            assert state.mailbox == []
            assert state.messages[-1] == user_text(folded)
            assert [r.text for r in await rt.rounds(sid)] == ["long task"]  # no turn drained it
            assert state.lifecycle == "stopped"
            await rt.assert_replay_matches(sid)


async def test_stop_logs_the_fold_before_it_aborts_the_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, LONG, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long task")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(sid, "note")
            await rt.sup.stop(sid)

            tags = [kind_of(r.event) for r in await rt.records(sid)]
            assert tags.index("mailbox_folded") < tags.index("complete") < tags.index("stopped")
            assert not rt.sup.state(sid).interrupt_requested


async def test_stop_clears_only_flags_that_are_set(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Nothing queued and no flag set: the stop has nothing to open with (no no-op
    ``flags_changed``), only the cut run's closing records and ``stopped``."""
    with trio.fail_after(BUDGET):
        async with running(tmp_path, LONG, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long task")
            await trio.testing.wait_all_tasks_blocked()
            before = rt.log.last_seq
            assert await rt.sup.stop(sid) is True

            tail = [kind_of(r.event) for r in await rt.records(sid) if r.seq > before]
            assert tail == ["complete", "agent_done", "stopped"]
            state = rt.sup.state(sid)
            assert not state.interrupt_requested and not state.self_kick
            await rt.assert_replay_matches(sid)


async def test_stop_during_a_tool_call_lands_the_fold_after_the_cut_result(
    tmp_path: Path,
) -> None:
    rules = (Rule(match=r"^work", steps=(Step(calls=(shell("echo $$ > s.pid; sleep 60"),)),)),)
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "work")
            await poll_until(lambda: read_pid(tmp_path / "s.pid") is not None)
            await rt.sup.send(sid, "queued note")
            await rt.sup.stop(sid)

            messages = rt.sup.state(sid).messages
            assert [type(b) for b in messages[1].content] == [ToolUseBlock]
            result = messages[2].content[0]
            assert isinstance(result, ToolResultBlock) and result.content == INTERRUPTED_RESULT
            assert messages[3] == user_text("queued note")
            assert_every_tool_use_answered_once(messages)


async def test_stop_kills_running_shell_commands_before_it_returns(tmp_path: Path) -> None:
    rules = (Rule(match=r"^work", steps=(Step(calls=(shell("echo $$ > s.pid; sleep 60"),)),)),)
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "work")
            await poll_until(lambda: read_pid(tmp_path / "s.pid") is not None)
            pgid = read_pid(tmp_path / "s.pid")
            assert pgid is not None
            await rt.sup.stop(sid)

            assert live_group_members(pgid) == []


async def test_stop_cascades_to_the_subtree_and_waits_for_every_running_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SPAWN, CHILD, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "spawn one")
            await rt.wait_for(sid, ToolReturned, lambda e: e.tool_name == "start_session")
            (child,) = rt.sup.children(sid)
            await rt.wait_for(child, AgentStarted)
            await trio.testing.wait_all_tasks_blocked()
            assert rt.sup.is_running(sid) and rt.sup.is_running(child)

            assert await rt.sup.stop(sid) is True

            for session in (sid, child):  # checked the moment stop returned
                assert not rt.sup.is_running(session)
                state = rt.sup.state(session)
                assert not state.turn_open
                assert state.lifecycle == "stopped"
                tags = [kind_of(r.event) for r in await rt.records(session)]
                assert tags.count("agent_start") == tags.count("complete")
                assert tags[-1] == "stopped"
            assert await rt.events(child, ReportSent) == []  # a cascade reports nothing


async def test_stopped_subtree_stays_quiet(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SPAWN, CHILD, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "spawn one")
            await rt.wait_for(sid, ToolReturned, lambda e: e.tool_name == "start_session")
            (child,) = rt.sup.children(sid)
            await rt.wait_for(child, AgentStarted)
            await rt.sup.stop(sid)
            before = rt.log.last_seq
            await trio.sleep(6)  # longer than any scripted delay

            assert rt.log.last_seq == before
            assert rt.sup.describe_tree(sid)[1]["status"] == "stopped"


async def compacting_after_two_turns(rt: Runtime) -> str:
    """A session that answered "first" and "second" and has a manual compaction running."""
    sid = await rt.sup.create_session(namespace="cli")
    for text in ("first", "second"):
        await rt.sup.send(sid, text)
        await rt.sup.wait_idle(sid)
    assert await rt.sup.compact(sid) == "started"
    await rt.wait_for(sid, FlagsChanged, lambda e: e.is_compacting is True)
    return sid


async def test_stop_during_a_manual_compaction_lands_the_fold_when_it_ends(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    model = SlowCompactionModel(Script(rules=(ANSWER_ANYTHING,)), seconds=5)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, model=model) as rt:
            sid = await compacting_after_two_turns(rt)
            await rt.sup.send(sid, "during the compaction")
            await rt.sup.stop(sid)

            state = rt.sup.state(sid)
            assert [m.text().split("\n")[0] for m in state.messages] == [
                "[summary of the earlier conversation]",
                "second",
                "ok",
                "during the compaction",
            ]
            tags = [kind_of(r.event) for r in await rt.records(sid)]
            assert tags.index("mailbox_folded") < tags.index("compacted")
            assert [r.text for r in await rt.rounds(sid)] == ["first", "second"]
            await rt.assert_replay_matches(sid)


async def test_archive_meeting_a_stop_under_way_waits_for_it_to_end(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Aborts of one session run one at a time: an archive asked for while a stop's cascade
    holds the session (its compaction has a grace to finish) archives it after the stop."""
    model = SlowCompactionModel(Script(rules=(ANSWER_ANYTHING,)), seconds=5)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, model=model) as rt, trio.open_nursery() as nursery:
            sid = await compacting_after_two_turns(rt)
            stopped = trio.Event()

            async def stop() -> None:
                await rt.sup.stop(sid)
                stopped.set()

            nursery.start_soon(stop)
            await trio.testing.wait_all_tasks_blocked()
            assert rt.sup.actor(sid).stopping and not stopped.is_set()
            await rt.sup.archive(sid)

            assert stopped.is_set()
            tags = [kind_of(r.event) for r in await rt.records(sid)]
            assert tags.count("stopped") == tags.count("archived") == 1
            assert tags.index("compacted") < tags.index("stopped") < tags.index("archived")
            assert rt.sup.state(sid).lifecycle == "archived"
            await rt.assert_replay_matches(sid)


def test_fold_during_a_compaction_is_parked_until_the_compaction_ends() -> None:
    sid = "cli_1_a"
    state = fold(
        sid,
        SessionCreated(agent_id="default"),
        MessageQueued(text="one"),
        RoundStarted(text="one", drained=1),
        AgentStarted(),
        AssistantReplied(content=(TextBlock(text="answer one"),)),
        TurnCompleted(),
        MessageQueued(text="two"),
        RoundStarted(text="two", drained=1),
        AgentStarted(),
        AssistantReplied(content=(TextBlock(text="answer two"),)),
        TurnCompleted(),
        FlagsChanged(is_compacting=True),
        MessageQueued(text="late", source_session_id="cli_2_b"),
        MailboxFolded(text="(from: session cli_2_b) late", count=1),
    )
    assert state.mailbox == []
    assert state.parked_folds == ("(from: session cli_2_b) late",)
    assert [m.text() for m in state.messages][-1] == "answer two"

    for event in (Compacted(summary="short", replaced=2), FlagsChanged(is_compacting=False)):
        state.apply(Record(seq=state.last_seq + 1, session_id=sid, ts=99, event=event))

    assert [m.text() for m in state.messages] == [
        "[summary of the earlier conversation]\nshort",
        "two",
        "answer two",
        "(from: session cli_2_b) late",
    ]
    parked: tuple[str, ...] = state.parked_folds  # (mypy still narrows it to the value above)
    assert parked == ()


def test_fold_during_an_open_turn_is_parked_until_the_turn_completes() -> None:
    sid = "cli_1_a"
    use = ToolUseBlock(id="toolu_1", name="shell_exec", input={"command": "sleep 60"})
    state = fold(
        sid,
        SessionCreated(agent_id="default"),
        MessageQueued(text="work"),
        RoundStarted(text="work", drained=1),
        AgentStarted(),
        AssistantReplied(content=(use,), stop_reason="tool_use"),
        ToolCalled(tool_name="shell_exec", tool_use_id="toolu_1"),
        MessageQueued(text="note"),
        MailboxFolded(text="note", count=1),
        ToolReturned(
            tool_name="shell_exec", tool_use_id="toolu_1", result=INTERRUPTED_RESULT, is_error=True
        ),
    )
    assert len(state.messages) == 3  # the fold waits: it must not split call and result
    state.apply(Record(seq=state.last_seq + 1, session_id=sid, ts=99, event=TurnCompleted()))

    assert state.messages[-1] == user_text("note")
    assert_every_tool_use_answered_once(state.messages)


async def test_message_arriving_during_a_stop_is_kept_and_runs_after_it(tmp_path: Path) -> None:
    # The command ignores SIGTERM: the stop waits out kill_grace, a window to send in.
    stubborn = Step(calls=(shell("trap '' TERM; echo $$ > s.pid; sleep 30"),))
    rules = (Rule(match=r"^work", steps=(stubborn,)), ANSWER_ANYTHING)
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, *rules, profiles=profiles_with(kill_grace=0.5)) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "work")
            await poll_until(lambda: read_pid(tmp_path / "s.pid") is not None)
            actor = rt.sup.actor(sid)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.sup.stop, sid)
                await poll_until(lambda: actor.stopping)
                assert await rt.sup.send(sid, "sent during the stop") == "queued"
                assert not rt.sup.state(sid).interrupt_requested
            await rt.sup.wait_idle(sid)

            after = [r.event for r in await rt.records(sid)]
            stopped = next(i for i, e in enumerate(after) if isinstance(e, SessionStopped))
            rounds = [e for e in after[stopped:] if isinstance(e, RoundStarted)]
            assert [(r.kind, r.text) for r in rounds] == [("opening", "sent during the stop")]
            assert rt.sup.state(sid).mailbox == []


async def test_stop_of_an_idle_session_reports_nothing_to_stop(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "hello")
            await rt.sup.wait_idle(sid)

            assert await rt.sup.stop(sid) is False
            assert await rt.events(sid, MailboxFolded) == []
            assert rt.sup.state(sid).lifecycle == "stopped"


async def test_two_turns_stopping_each_other_both_stop_without_deadlock(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    root = "cli_mutual"
    a, b = f"{root}>a", f"{root}>b"
    rules = (
        Rule(match=f"stop {b}", steps=(Step(calls=(call("stop_session", session_id=b),)),)),
        Rule(match=f"stop {a}", steps=(Step(calls=(call("stop_session", session_id=a),)),)),
        ANSWER_ANYTHING,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            await rt.sup.create_session(root)
            for child in (a, b):
                await rt.sup.create_session(child, parent_id=root)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.sup.send, a, f"stop {b}")
                nursery.start_soon(rt.sup.send, b, f"stop {a}")
            for sid in (a, b):  # each cascade outlives the tool call that asked for it
                await rt.wait_for(sid, SessionStopped)
            await rt.sup.wait_idle(root)

            for sid in (a, b):
                assert await rt.events(sid, SessionStopped) == [SessionStopped()]
                assert not rt.sup.is_running(sid)
                assert_every_tool_use_answered_once(rt.sup.state(sid).messages)


async def test_history_shows_a_stops_fold_where_the_model_sees_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: history and the model's conversation agree on order when a stop folds
    queued messages during a turn ("the model's order is the truth"): the fold lands
    after the cut text, in the conversation and in ``/api/web/history`` alike."""
    rules = (Rule(match=r"^go", steps=(Step(text="partial answer here", chunk=4, delay=1),)),)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "go")
            await rt.wait_for(sid, TextStreamed, count=2)
            await rt.sup.send(sid, "queued note")
            await rt.sup.stop(sid)

            conversation = [(m.role, m.text()) for m in rt.sup.state(sid).messages]
            fold = HistoryFold()  # what /api/web/history pages from
            for record in await rt.log.read(EventFilter(session_id=sid, kinds=HISTORY_KINDS)):
                fold.apply(record)
            rows = fold.rows
            assert [(row["role"], row["text"]) for row in rows] == conversation
            ids = [int(str(row["id"])) for row in rows]
            assert ids == sorted(set(ids))  # still in log order: paging by id holds
            assert conversation[-1] == ("user", "queued note")
            assert conversation[1][1].endswith(STREAM_CUT_MARKER)
