"""Reports up the tree: final (once per child run, when its subtree is quiet), interim
(when the parent's round gets an answer and another turn follows), deferred interim."""

from __future__ import annotations

import re
from pathlib import Path

import trio
import trio.testing
from runtime_harness import BUDGET, Rule, Runtime, Step, call, profiles_with, running

from halo_actors.core import ids
from halo_actors.core.events import AgentDone, ReportSent, RoundStarted, TextStreamed, ToolReturned
from halo_actors.runtime.rounds import (
    FINAL_HEADER,
    INTERIM_FOOTER,
    INTERIM_HEADER,
    SIBLINGS_RUNNING,
    report_recipient,
)

NOTED = Rule(steps=(Step(text="noted"),))
"""The parent's answer to anything (reports included): put last."""


def start(task: str) -> Step:
    return Step(calls=(call("start_session", task=task),))


def final(output: str) -> str:
    return f"{FINAL_HEADER}\n{output}"


def interim(output: str) -> str:
    return f"{INTERIM_HEADER}\n{output}\n\n{INTERIM_FOOTER}"


async def kinds_sent(rt: Runtime, sid: str) -> list[str]:
    return [r.kind for r in await rt.events(sid, ReportSent)]


async def texts_received(rt: Runtime, sid: str, source: str) -> list[str]:
    """What ``sid``'s rounds took in from ``source``, message by message (a merged round
    holds several, each with its ``(from: session X)`` prefix)."""
    prefix = f"(from: session {source}) "
    return [
        part.removeprefix(prefix)
        for r in await rt.rounds(sid)
        for part in re.split(r"\n\n(?=\(from: session )", r.text)
        if part.startswith(prefix)
    ]


async def test_child_sends_its_final_report_once_when_its_run_ends(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (
        Rule(match=r"child task", steps=(Step(text="child result"),)),
        Rule(match=r"^spawn", steps=(start("child task"), Step(text="spawned"))),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "spawn one")
            await rt.sup.wait_idle(sid)

            (child,) = rt.sup.children(sid)
            assert await rt.events(child, ReportSent) == [
                ReportSent(to_session_id=sid, kind="final")
            ]
            assert rt.sup.state(child).final_reports == 1
            received = [r for r in await rt.rounds(sid) if child in r.from_session_ids]
            assert [r.text for r in received] == [
                f"(from: session {child}) {final('child result')}"
            ]


async def test_final_report_waits_until_the_childs_subtree_is_quiet(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (
        Rule(match=r"grand task", steps=(Step(text="grand result", delay=5),)),
        Rule(match=r"status: done\]\ngrand result", steps=(Step(text="child final answer"),)),
        Rule(match=r"delegate please", steps=(start("grand task"), Step(text="delegated"))),
        Rule(match=r"^spawn", steps=(start("delegate please"), Step(text="spawned"))),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "spawn one")
            await rt.sup.wait_idle(sid)

            (child,) = rt.sup.children(sid)
            (grandchild,) = rt.sup.children(child)
            records = await rt.records()
            reports = [
                (r.session_id, r.event.kind) for r in records if isinstance(r.event, ReportSent)
            ]
            assert reports == [
                (grandchild, "final"),
                (child, "final"),  # only once its subtree went quiet
            ]
            assert await texts_received(rt, sid, child) == [final("child final answer")]


async def test_a_dispatch_turn_owes_the_final_report_not_a_deferred_interim(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: "a deferred interim is owed only if a child was already running when the
    turn *started* (a dispatch turn owes the final report)". The child's opening turn
    starts a grandchild and answers; its run ends while the grandchild runs: nothing
    goes up until the final report."""
    rules = (
        Rule(match=r"grand task", steps=(Step(text="grand result", delay=5),)),
        Rule(match=r"status: done\]\ngrand result", steps=(Step(text="all done"),)),
        Rule(match=r"delegate please", steps=(start("grand task"), Step(text="delegated"))),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "delegate please")
            await rt.sup.wait_idle(parent)

            (grandchild,) = rt.sup.children(child)
            sent = [
                (r.session_id, r.event.kind)
                for r in await rt.records()
                if isinstance(r.event, ReportSent)
            ]
            assert sent == [(grandchild, "final"), (child, "final")]  # nothing before
            assert await texts_received(rt, parent, child) == [final("all done")]


async def test_deferred_interim_forwards_an_answer_given_while_a_child_ran(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: "A session waiting on its own children that answered its parent, and whose
    run ends with a child still running, forwards that answer as an interim". The
    parent asks "status?" while the grandchild runs: that answer goes up at once."""
    rules = (
        Rule(match=r"grand task", steps=(Step(text="grand result", delay=5),)),
        Rule(match=r"status\?", steps=(Step(text="still waiting on my helper"),)),
        Rule(match=r"status: done\]\ngrand result", steps=(Step(text="all done"),)),
        Rule(match=r"delegate please", steps=(start("grand task"), Step(text="delegated"))),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "delegate please")
            await rt.wait_for(child, AgentDone)
            await rt.sup.send(child, "status?", source=parent)
            await rt.wait_for(child, ReportSent)

            (grandchild,) = rt.sup.children(child)
            assert rt.sup.is_running(grandchild)
            assert await kinds_sent(rt, child) == ["interim"]
            await rt.wait_for(parent, RoundStarted, lambda e: child in e.from_session_ids)
            assert await texts_received(rt, parent, child) == [
                interim("still waiting on my helper")
            ]
            await rt.sup.wait_idle(parent)
            assert await kinds_sent(rt, child) == ["interim", "final"]
            assert await texts_received(rt, parent, child) == [
                interim("still waiting on my helper"),
                final("all done"),
            ]


async def test_parent_with_other_children_running_is_told_not_to_wrap_up_yet(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    both = Step(
        calls=(call("start_session", task="fast kid"), call("start_session", task="slow kid"))
    )
    rules = (
        Rule(match=r"fast kid", steps=(Step(text="fast result", delay=1),)),
        Rule(match=r"slow kid", steps=(Step(text="slow result", delay=5),)),
        Rule(match=r"^spawn", steps=(both, Step(text="spawned both"))),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "spawn two")
            await rt.sup.wait_idle(sid)

            kids = {rt.sup.state(c).description: c for c in rt.sup.children(sid)}
            fast, slow = kids["fast kid"], kids["slow kid"]
            assert await texts_received(rt, sid, fast) == [
                f"{final('fast result')}\n\n{SIBLINGS_RUNNING}"
            ]
            assert await texts_received(rt, sid, slow) == [final("slow result")]


async def test_a_sibling_idle_while_its_own_sub_session_runs_still_counts_as_running(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    both = Step(
        calls=(call("start_session", task="fast kid"), call("start_session", task="delegator"))
    )
    rules = (
        Rule(match=r"fast kid", steps=(Step(text="fast result", delay=1),)),
        Rule(match=r"slow grandkid", steps=(Step(text="slow result", delay=5),)),
        Rule(match=r"delegator", steps=(start("slow grandkid"), Step(text="delegated"))),
        Rule(match=r"^spawn", steps=(both, Step(text="spawned both"))),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "spawn two")
            await rt.sup.wait_idle(sid)

            kids = {rt.sup.state(c).description: c for c in rt.sup.children(sid)}
            assert await texts_received(rt, sid, kids["fast kid"]) == [
                f"{final('fast result')}\n\n{SIBLINGS_RUNNING}"
            ]


async def test_final_report_is_capped_at_report_cap(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"long task", steps=(Step(text="x" * 50),)), NOTED)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules, profiles=profiles_with(report_cap=10)) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "long task")
            await rt.sup.wait_idle(parent)

            (report,) = await texts_received(rt, parent, child)
            assert report == final("x" * 10 + "\n[… 40 more characters not shown]")


async def test_opening_turn_sends_its_whole_output_as_interim_when_a_follow_up_is_queued(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    first = (Step(text="first part, ", calls=(call("list_sessions"),)), Step(text="rest", delay=1))
    rules = (
        Rule(match=r"first job", steps=first),
        Rule(match=r"second job", steps=(Step(text="second done"),)),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "first job")
            await rt.wait_for(child, ToolReturned)
            await trio.testing.wait_all_tasks_blocked()  # in the opening turn's last model call
            await rt.sup.send(child, "second job", source=parent)
            await rt.sup.wait_idle(parent)

            assert await kinds_sent(rt, child) == ["interim", "final"]
            assert await texts_received(rt, parent, child) == [
                interim("first part, rest"),
                final("second done"),
            ]


async def test_drained_round_from_the_parent_sends_an_interim_when_another_round_follows(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (
        Rule(match=r"job one", steps=(Step(text="one done", delay=1),)),
        Rule(match=r"job two", steps=(Step(text="two done", delay=1),)),
        Rule(match=r"job three", steps=(Step(text="three done"),)),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "job one")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(child, "job two", source=parent)
            await rt.wait_for(child, RoundStarted, lambda e: "job two" in e.text)
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(child, "job three", source=parent)
            await rt.sup.wait_idle(parent)

            assert await kinds_sent(rt, child) == ["interim", "interim", "final"]
            assert await texts_received(rt, parent, child) == [
                interim("one done"),
                interim("two done"),
                final("three done"),
            ]


async def test_no_interim_for_a_persons_own_chat(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"^chat one", steps=(Step(text="answer one", delay=1),)), NOTED)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.create_session(ids.child_id(parent, "c1"), parent_id=parent)
            for sid in (parent, child):  # a root, and a child a person talks to directly
                await rt.sup.send(sid, "chat one")
                await trio.testing.wait_all_tasks_blocked()
                await rt.sup.send(sid, "chat two")
                await rt.sup.wait_idle(sid)

            assert await kinds_sent(rt, parent) == []
            assert await kinds_sent(rt, child) == ["final"]  # the run's end, not an interim


async def test_no_interim_for_messages_from_siblings(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"sibling asks", steps=(Step(text="an answer", delay=1),)), NOTED)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.create_session(ids.child_id(parent, "c1"), parent_id=parent)
            sibling = await rt.sup.create_session(ids.child_id(parent, "c2"), parent_id=parent)
            await rt.sup.send(child, "sibling asks", source=sibling)
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(child, "sibling asks again", source=sibling)
            await rt.sup.wait_idle(child)

            assert await kinds_sent(rt, child) == ["final"]


async def test_no_interim_for_an_errored_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    failing = (
        Step(text="I started", calls=(call("list_sessions"),)),
        Step(text="oops", fail="provider down", delay=1),
    )
    rules = (
        Rule(match=r"failing job", steps=failing),
        Rule(match=r"next job", steps=(Step(text="next done"),)),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "failing job")
            await rt.wait_for(child, ToolReturned)
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(child, "next job", source=parent)
            await rt.sup.wait_idle(parent)

            assert await kinds_sent(rt, child) == ["final"]
            assert await texts_received(rt, parent, child) == [final("next done")]


async def test_no_interim_for_a_turn_cut_by_a_hard_interrupt(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    slow = (Step(text="partial thoughts", chunk=4, delay=1),)
    rules = (
        Rule(match=r"slow job", steps=slow),
        Rule(match=r"change of plan", steps=(Step(text="new plan done"),)),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "slow job")
            await rt.wait_for(child, TextStreamed, count=2)
            await rt.sup.interrupt(child, "change of plan", source=parent)
            await rt.sup.wait_idle(parent)

            assert await kinds_sent(rt, child) == ["final"]
            assert await texts_received(rt, parent, child) == [final("new plan done")]


async def test_wait_idle_covers_a_final_report_sent_after_the_childs_run_ended(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"child task", steps=(Step(text="child result"),)), NOTED)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "child task")
            await rt.sup.wait_idle(parent)

            # the report (sent after the child's AgentDone) reached the parent and was answered
            assert [m.text() for m in rt.sup.state(parent).messages] == [
                f"(from: session {child}) {final('child result')}",
                "noted",
            ]
            assert not rt.sup.is_running(parent)


# --- the recipient rule, as a pure function ----------------------------------------


def test_report_recipient_is_the_parent_when_the_round_came_from_it() -> None:
    assert report_recipient("p", ("p",)) == "p"
    assert report_recipient("p", ("", "p", "p>sib")) == "p"


def test_report_recipient_is_nobody_for_a_person_a_sibling_or_a_resume() -> None:
    assert report_recipient("p", ("",)) is None
    assert report_recipient("p", ("p>sib",)) is None
    assert report_recipient("p", ()) is None  # a resume kick has no sources


def test_report_recipient_is_nobody_for_a_root_session() -> None:
    assert report_recipient(None, ("",)) is None
    assert report_recipient(None, ("other",)) is None
