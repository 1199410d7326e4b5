"""soft-interrupt: two messages during a turn, one merged answer, the command not killed."""

from __future__ import annotations

from pathlib import Path

from demo_harness import play_json

from halo_actors.core.events import (
    AssistantReplied,
    MessageQueued,
    RoundStarted,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
)
from halo_actors.demo.scenarios.common import text_of
from halo_actors.demo.scenarios.soft_interrupt import ASKS


async def test_two_messages_during_a_command_get_one_merged_answer(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "soft-interrupt")

    merged = [r for r in played.events(RoundStarted) if r.kind == "drained"]
    assert len(merged) == 1
    assert merged[0].drained == 2 and merged[0].resumed_after_interrupt
    assert all(ask in merged[0].text for ask in ASKS)
    last_reply = played.events(AssistantReplied)[-1]
    assert all(ask in text_of(last_reply) for ask in ASKS)
    assert played.ok


async def test_the_running_command_finishes_and_its_output_lands(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "soft-interrupt")

    [call] = played.seqs(ToolCalled)
    [result] = played.events(ToolReturned)
    assert result.result.startswith("built") and "[exit code 0]" in result.result
    assert result.ui_result is None  # the soft path leaves no interrupted marker
    queued_during_command = [s for s in played.seqs(MessageQueued) if s > call]
    assert len(queued_during_command) == 2
    assert all(s < played.seqs(ToolReturned)[0] for s in queued_during_command)
    first, last = played.events(TurnCompleted)
    assert (first.batch_boundary, first.stop_reason) == (True, "interrupted")
    assert (last.batch_boundary, last.stop_reason) == (False, "end_turn")
