"""fan-out: a lead starts three workers in one parallel batch; one of them starts a helper.

The workers run real shell commands at the same time; each reports back up the
tree. When the first final report says others still run, the lead asks the docs
worker how far it is; that worker is waiting on its own helper, so its answer goes
up as an interim report while the helper still runs (a turn that only dispatched
the helper owes the final report, not an interim). The lead gives its answer once
the last final report says nobody else is still working.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ...agent.scripted import Rule, Script, ScriptedModel, Step
from ...core.conversation import ToolUseBlock
from ...core.events import (
    AgentDone,
    AssistantReplied,
    MessageQueued,
    Record,
    ReportSent,
    ToolCalled,
    ToolReturned,
)
from ...core.state import SessionState
from ...runtime.profiles import Profiles
from ...runtime.rounds import INTERIM_HEADER
from ..scenario import Scenario
from ..stage import Stage
from .common import FROM_SESSION, call, pace, profile, reports_in, shell, start, text_of

ALL_DONE = "All workers are done."
HOW_FAR = "How far are the docs?"


def _lead(docs_worker: Callable[[], str | None]) -> Script:
    """The lead; ``docs_worker`` names the docs worker once it exists (the scripted
    stand-in for a model that read the id from its ``start_session`` result)."""
    asked: list[str] = []

    def on_reports(found: re.Match[str]) -> tuple[Step, ...]:
        finals, interims, others_running = reports_in(found.string)
        if finals == 0:
            return (Step(text=f"Noted {interims} interim report(s); the work goes on."),)
        if others_running:
            docs = docs_worker()
            if docs is None or asked:
                return (Step(text=f"Got {finals} final report(s); others still run, so I wait."),)
            asked.append(docs)
            query = call("query_session", session_id=docs, message=HOW_FAR)
            return (
                Step(
                    text="Others still run; asking the docs worker how far it is.", calls=(query,)
                ),
                Step(text="Asked; I wait for the rest."),
            )
        return (Step(text=f"{ALL_DONE} Files counted, tests pass, docs read fine.", chunk=12),)

    return Script(rules=(*LEAD_RULES, Rule(match=FROM_SESSION, build=on_reports)))


LEAD_RULES = (
    Rule(
        match="check the project",
        steps=(
            Step(
                text="Splitting the check into three parallel jobs.\n",
                calls=(
                    start("count the Python files", agent="worker", label="count"),
                    start("run the test suite", agent="worker", label="tests"),
                    start("review the docs", agent="worker", label="docs"),
                ),
            ),
            Step(text="Three workers are on it; I answer when all have reported."),
        ),
    ),
)


def _worker(stage: Stage) -> Script:
    tests = f"sleep {pace(stage.seconds(1.5))}; grep -c 'def test_' tests/*.py"
    return Script(
        rules=(
            Rule(
                match="count the Python files",
                steps=(
                    Step(calls=(shell("find src tests -name '*.py' | wc -l"),)),
                    Step(text="Counted the Python files."),
                ),
            ),
            Rule(
                match="run the test suite",
                steps=(Step(calls=(shell(tests),)), Step(text="The test suite passes.")),
            ),
            Rule(
                match="review the docs",
                steps=(
                    Step(calls=(start("spell-check the docs", agent="helper", label="spell"),)),
                    Step(text="A helper is spell-checking the docs; I report when it is back."),
                ),
            ),
            Rule(
                match=re.escape(HOW_FAR),
                steps=(Step(text="The spell-check helper is still at it; nothing to fix yet."),),
            ),
            Rule(match=r"\[Final report", steps=(Step(text="Docs reviewed: no typos found."),)),
        )
    )


def _helper(stage: Stage) -> Script:
    spell = f"sleep {pace(stage.seconds(3))}; wc -w README.md docs/guide.md"
    return Script(
        rules=(
            Rule(
                match="spell-check",
                steps=(Step(calls=(shell(spell),)), Step(text="Spell-check done: no typos.")),
            ),
        )
    )


def _model(stage: Stage, docs_worker: Callable[[], str | None]) -> ScriptedModel:
    return ScriptedModel(
        {"lead": _lead(docs_worker), "worker": _worker(stage), "helper": _helper(stage)}
    )


PROFILES = Profiles(
    {
        "lead": profile("lead", "worker", description="splits a job across workers"),
        "worker": profile("worker", "helper", description="does one part of a job"),
        "helper": profile("helper", description="a worker's own sub-agent"),
    }
)


async def play(stage: Stage) -> None:
    lead = ""

    def docs_worker() -> str | None:
        return next((s for s in sup.children(lead) if sup.state(s).title == "docs"), None)

    async with stage.runtime(_model(stage, docs_worker), PROFILES) as sup:
        lead = await sup.create_session(namespace="demo", agent_id="lead", title="lead")
        await stage.note(
            "the user asks the lead to check the project; it starts three workers at once"
        )
        await sup.send(lead, "check the project: files, tests and docs")
        await stage.wait_record(
            "an interim report reaching the lead",
            lambda r: isinstance(r.event, MessageQueued) and INTERIM_HEADER in r.event.text,
            session_id=lead,
        )
        await stage.snapshot("the tree when the first interim report arrived", sup.sessions())
        await stage.wait_idle(sup, lead)
        await stage.snapshot("the tree at the end", sup.sessions())
        await _check(stage, lead, sup.sessions(), await stage.records())


async def _check(
    stage: Stage, lead: str, states: list[SessionState], records: list[Record]
) -> None:
    children = [s.session_id for s in states if s.session_id != lead]
    replies = [r.event for r in records if isinstance(r.event, AssistantReplied)]
    uses = [u for u in replies[0].content if isinstance(u, ToolUseBlock)] if replies else []
    await stage.check(f"the lead started {len(uses)} workers in one parallel batch", len(uses) == 3)
    await stage.check(
        "a worker started a grandchild",
        any(s.parent_id in children for s in states if s.session_id in children),
    )
    finals = [r for r in records if isinstance(r.event, ReportSent) and r.event.kind == "final"]
    await stage.check(
        "every sub-session reported back exactly once",
        sorted(r.session_id for r in finals) == sorted(children),
    )
    await stage.check(
        "the slow test command and the helper's command ran at the same time",
        _overlap(records, _titled(states, "tests"), _titled(states, "spell")),
    )
    await _check_reports(stage, lead, records)


def _titled(states: list[SessionState], title: str) -> str:
    return next((s.session_id for s in states if s.title == title), "")


def _overlap(records: list[Record], first: str, second: str) -> bool:
    """Whether ``first``'s shell command ran while ``second``'s did (by log order)."""
    spans: dict[str, list[int]] = {first: [], second: []}
    for r in records:
        shell = isinstance(r.event, ToolCalled | ToolReturned) and r.event.tool_name == "shell_exec"
        if shell and r.session_id in spans:
            spans[r.session_id].append(r.seq)
    if any(len(seqs) < 2 for seqs in spans.values()):
        return False
    (a_start, a_end), (b_start, b_end) = spans[first][:2], spans[second][:2]
    return a_start < b_end and b_start < a_end


async def _check_reports(stage: Stage, lead: str, records: list[Record]) -> None:
    interims = [r for r in records if isinstance(r.event, ReportSent) and r.event.kind == "interim"]
    others = [r.seq for r in records if isinstance(r.event, AgentDone) and r.session_id != lead]
    await stage.check(
        "an interim report went up while the helper still ran",
        bool(interims) and interims[0].seq < max(others),
    )
    answers = [
        r.seq
        for r in records
        if r.session_id == lead
        and isinstance(r.event, AssistantReplied)
        and ALL_DONE in text_of(r.event)
    ]
    await stage.check(
        "the lead answered once, after its whole subtree was quiet",
        len(answers) == 1 and answers[0] > max(others),
    )


SCENARIO = Scenario(
    name="fan-out",
    title="a lead fans a job out to parallel workers; reports come back up the tree",
    play=play,
    shown=(
        "one model response started three sub-sessions; they ran shell commands in parallel",
        "a worker started its own helper (a grandchild): trees nest",
        "asked how far it was, a worker waiting on its helper answered with an interim report",
        "each sub-session sent exactly one final report when its own subtree was quiet",
        "the lead answered when the last report said nobody else was still working",
    ),
    docs=("docs/design/actors.md (Reports up the tree)", "docs/demo.md"),
)
