"""hard-interrupt: interrupt_session kills the whole process group; the child resumes."""

from __future__ import annotations

from pathlib import Path

from demo_harness import play_json

from halo_actors.agent.repair import INTERRUPTED_RESULT, UI_INTERRUPTED
from halo_actors.core.events import AssistantReplied, RoundStarted, ToolCalled, ToolReturned
from halo_actors.demo.scenarios.common import text_of
from halo_actors.demo.scenarios.hard_interrupt import LONG, PID_FILE, QUICK, RESUMED
from halo_actors.tools.shell import process_group_alive


async def test_interrupt_session_kills_the_group_and_the_child_resumes(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "hard-interrupt")

    runner = played.session_named("lead>runner")
    calls = {c.tool_input.get("command"): c.tool_use_id for c in played.events(ToolCalled, runner)}
    results = {r.tool_use_id: r for r in played.events(ToolReturned, runner)}
    quick, cut = results[calls[QUICK]], results[calls[LONG]]
    assert "quick step ok" in quick.result and quick.ui_result is None
    assert (cut.ui_result, cut.result, cut.is_error) == (UI_INTERRUPTED, INTERRUPTED_RESULT, True)
    assert "done" not in cut.result

    rounds = played.events(RoundStarted, runner)
    assert [r.kind for r in rounds] == ["opening", "drained", "resume"]
    assert rounds[1].resumed_after_interrupt
    kick = [r for r in played.events(ToolReturned, runner) if r.tool_name == "continue_task"]
    assert len(kick) == 1 and kick[0].result.startswith("ok")
    assert played.events(ToolReturned, runner)[-1] is kick[0]
    last_reply = played.events(AssistantReplied, runner)[-1]
    assert RESUMED in text_of(last_reply)


async def test_the_killed_command_leaves_no_process_in_its_group(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "hard-interrupt")

    pgid = int((tmp_path / "hard-interrupt" / PID_FILE).read_text())
    assert not process_group_alive(pgid)
    died = [label for label, ok in played.checks().items() if label.startswith("process group")]
    assert len(died) == 1 and played.checks()[died[0]]
