"""Reports up the tree, rule by rule: what counts as an answer, what a cut or an errored
turn sends, and what triggers an interim (``docs/design/actors.md``, "Reports up the
tree"). Each test quotes the rule it enforces."""

from __future__ import annotations

import re
from pathlib import Path

import trio
import trio.testing
from runtime_harness import BUDGET, Rule, Runtime, Step, call, running

from halo_actors.agent.repair import STREAM_CUT_MARKER
from halo_actors.core.events import ReportSent, RoundStarted, TextStreamed
from halo_actors.runtime.rounds import INTERIM_FOOTER, INTERIM_HEADER, final_header

NOTED = Rule(steps=(Step(text="noted"),))
"""The parent's answer to anything (reports included): put last."""
CONTINUE = call("continue_task")


def final(output: str, status: str = "done") -> str:
    return f"{final_header(status)}\n{output}"


def interim(output: str) -> str:
    return f"{INTERIM_HEADER}\n{output}\n\n{INTERIM_FOOTER}"


async def reports_from(rt: Runtime, parent: str, child: str) -> list[str]:
    """The texts ``parent`` received from ``child``, in order (a round may merge several)."""
    prefix = f"(from: session {child}) "
    return [
        message.removeprefix(prefix)
        for r in await rt.rounds(parent)
        for message in re.split(r"\n\n(?=\(from: session )", r.text)
        if message.startswith(prefix)
    ]


async def test_a_kick_armed_turn_that_yields_at_a_batch_boundary_counts_as_an_answer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: "a turn counts as an answer when its self-kick is armed **or** it ended
    naturally with text". The child answers and arms ``continue_task``; a follow-up from
    the parent makes the turn yield at that batch boundary: the answer still goes up."""
    rules = (
        Rule(match=r"long job", steps=(Step(text="long work", delay=1),)),
        Rule(
            match=r"urgent",
            steps=(Step(text="urgent handled", delay=1, calls=(CONTINUE,)), Step(text="never")),
        ),
        Rule(match=r"follow-up", steps=(Step(text="follow-up done"),)),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "long job")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(child, "urgent", source=parent)
            await rt.wait_for(child, RoundStarted, lambda e: "urgent" in e.text)
            await trio.testing.wait_all_tasks_blocked()  # in the urgent turn's first call
            await rt.sup.send(child, "follow-up", source=parent)
            await rt.sup.wait_idle(parent)

            kick = [r for r in await rt.results(child) if r.tool_name == "continue_task"]
            assert [r.result for r in kick] == [
                "ok: the task resumes in a new turn once this one ends"
            ]
            assert (await rt.completes(child))[1].stop_reason == "interrupted"
            assert await reports_from(rt, parent, child) == [
                interim("long work"),
                interim("urgent handled"),
                final("follow-up done"),
            ]


async def test_landed_text_of_a_hard_cut_turn_never_becomes_output_or_a_report(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: "landed text never changes output or final output, and end-of-run reports
    read only the last turn". The cut text stays in the child's conversation with its
    marker; it is neither ``get_session_output`` nor a ``done`` report."""
    rules = (
        Rule(match=r"slow job", steps=(Step(text="partial thoughts", chunk=4, delay=1),)),
        Rule(match=r"be quiet", steps=()),  # a turn that ends with no text
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "slow job")
            await rt.wait_for(child, TextStreamed, count=2)
            await rt.sup.interrupt(child, "be quiet", source=parent)
            await rt.sup.wait_idle(parent)

            texts = [m.text() for m in rt.sup.state(child).messages]
            assert any(t.endswith(STREAM_CUT_MARKER) for t in texts)  # landed, with its marker
            assert rt.sup.output(child) == ""
            (report,) = await reports_from(rt, parent, child)
            assert STREAM_CUT_MARKER not in report and "partial" not in report
            assert report == final("(no text output)")
            await rt.assert_replay_matches(child)


async def test_an_errored_last_turn_makes_the_final_report_an_error(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: "The final report reflects the last turn: an errored run reports its error
    status." Turn 1's answer went up as an interim; turn 2 failed: the parent hears of
    the error, not turn 1's answer a second time as ``done``."""
    rules = (
        Rule(match=r"first job", steps=(Step(text="first answer", delay=1),)),
        Rule(match=r"second job", steps=(Step(fail="provider down"),)),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "first job")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(child, "second job", source=parent)
            await rt.sup.wait_idle(parent)

            assert [r.kind for r in await rt.events(child, ReportSent)] == ["interim", "final"]
            assert await reports_from(rt, parent, child) == [
                interim("first answer"),
                final("model error: provider down", "error"),
            ]


async def test_an_interim_is_sent_when_a_kick_is_coming_even_with_an_empty_mailbox(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: "If another turn will follow (a kick is coming or the mailbox is not empty)
    and the turn produced an answer, and the round came from the party this session
    owes a report (its parent), the turn's whole output is forwarded now". Here the
    mailbox is empty and only the armed kick says another turn follows."""
    rules = (
        Rule(match=r"long job", steps=(Step(text="long work", delay=1),)),
        Rule(
            match=r"urgent",
            steps=(Step(text="urgent handled, ", calls=(CONTINUE,)), Step(text="resuming")),
        ),
        Rule(kind="resume", steps=(Step(text="long work finished"),)),
        NOTED,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "long job")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(child, "urgent", source=parent)
            await rt.sup.wait_idle(parent)

            assert [r.kind for r in await rt.rounds(child)] == ["opening", "drained", "resume"]
            assert await reports_from(rt, parent, child) == [
                interim("long work"),
                interim("urgent handled, resuming"),
                final("long work finished"),
            ]
