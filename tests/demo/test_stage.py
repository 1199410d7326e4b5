"""The stage fails a scenario that waits for something the runtime never does; it never hangs."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import trio
from demo_harness import parse

from halo_actors.agent.scripted import ScriptedModel
from halo_actors.core.events import ErrorRaised, TurnCompleted
from halo_actors.demo import stage as stage_module
from halo_actors.demo.scenario import Scenario
from halo_actors.demo.stage import Stage
from halo_actors.demo.tour import tour
from halo_actors.demo.view import JsonView
from halo_actors.runtime.profiles import Profiles


async def _waits_for_an_error_that_never_comes(stage: Stage) -> None:
    async with stage.runtime(ScriptedModel({}), Profiles()) as sup:
        root = await sup.create_session(namespace="demo", title="quiet")
        await sup.send(root, "hello")
        await stage.wait_event(root, ErrorRaised, what="an error from a healthy session")


STUCK = Scenario(
    name="stuck",
    title="waits for an error that never comes",
    play=_waits_for_an_error_that_never_comes,
    shown=("nothing",),
    docs=("docs/demo.md",),
)


async def test_a_stuck_wait_fails_the_scenario_with_a_named_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stage_module, "WAIT_SECONDS", 0.3)
    out = io.StringIO()
    with trio.fail_after(10):
        ok = await tour([STUCK], tmp_path, JsonView(out), 1.0)
    records, lines = parse(out.getvalue())
    checks = {x["label"]: x["ok"] for x in lines if x["demo"] == "check"}
    assert not ok, checks
    assert checks.get("stuck: waited 0.3 s for an error from a healthy session") is False, checks
    assert [x["demo"] for x in lines][-2:] == ["check", "note"]  # the tour still finished
    assert any(isinstance(r.event, TurnCompleted) for r in records)
