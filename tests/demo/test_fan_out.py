"""fan-out: parallel workers, a grandchild, interim and final reports up the tree."""

from __future__ import annotations

from pathlib import Path

from demo_harness import play_json

from halo_actors.core.events import (
    AgentDone,
    AssistantReplied,
    MessageQueued,
    ReportSent,
    SessionCreated,
    ToolCalled,
    ToolReturned,
)
from halo_actors.demo.scenarios.common import text_of
from halo_actors.demo.scenarios.fan_out import ALL_DONE
from halo_actors.runtime.rounds import INTERIM_HEADER


async def test_workers_run_in_parallel_and_each_reports_once(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "fan-out")

    lead = played.session_named("lead")
    created = [r for r in played.records if isinstance(r.event, SessionCreated)]
    children = [r.session_id for r in created if r.session_id != lead]
    assert len(children) == 4  # three workers and the docs worker's helper
    helper = played.session_named("lead>docs>spell")
    tests = played.session_named("lead>tests")
    shell_sessions = {
        r.session_id
        for r in played.records
        if isinstance(r.event, ToolCalled) and r.event.tool_name == "shell_exec"
    }
    assert shell_sessions == {played.session_named("lead>count"), tests, helper}
    # The slow test command and the helper's command ran at the same time.
    [tests_done] = played.seqs(ToolReturned, tests)
    assert all(seq < tests_done for seq in played.seqs(ToolCalled, helper))
    assert played.seqs(ToolReturned, helper)[0] > tests_done
    finals = [
        r.session_id
        for r in played.records
        if isinstance(r.event, ReportSent) and r.event.kind == "final"
    ]
    assert sorted(finals) == sorted(children)


async def test_an_interim_report_arrives_while_the_helper_still_runs(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "fan-out")

    lead, helper = played.session_named("lead"), played.session_named("lead>docs>spell")
    interims = [
        r.seq
        for r in played.records
        if r.session_id == lead
        and isinstance(r.event, MessageQueued)
        and INTERIM_HEADER in r.event.text
    ]
    assert interims and interims[0] < played.seqs(AgentDone, helper)[-1]


async def test_the_lead_answers_once_after_its_whole_subtree_is_quiet(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "fan-out")

    lead = played.session_named("lead")
    answers = [
        r.seq
        for r in played.records
        if r.session_id == lead
        and isinstance(r.event, AssistantReplied)
        and ALL_DONE in text_of(r.event)
    ]
    others_done = max(
        r.seq for r in played.records if isinstance(r.event, AgentDone) and r.session_id != lead
    )
    assert len(answers) == 1 and answers[0] > others_done
