"""crash-replay: a SIGKILLed runtime's tree is rebuilt from the log, its turns closed."""

from __future__ import annotations

from pathlib import Path

from demo_harness import play_json

from halo_actors.core.events import ErrorRaised, MessageQueued, RoundStarted, TurnCompleted
from halo_actors.core.state import replay
from halo_actors.demo.scenarios.crash_replay import NOTES


async def test_cut_turns_are_closed_and_the_restart_answers_the_queued_notes(
    tmp_path: Path,
) -> None:
    played = await play_json(tmp_path, "crash-replay")

    planner, researcher = (
        played.session_named("planner"),
        played.session_named("planner>researcher"),
    )
    killed = [label for label, ok in played.checks().items() if "SIGKILL" in label]
    assert killed and played.checks()[killed[0]]
    for sid in (planner, researcher):
        closing = [
            r.event
            for r in played.records
            if r.session_id == sid and isinstance(r.event, ErrorRaised | TurnCompleted)
        ]
        error, complete = closing[0], closing[1]
        assert isinstance(error, ErrorRaised) and "runtime restarted" in error.error
        assert isinstance(complete, TurnCompleted) and complete.stop_reason == "restarted"
        assert not complete.batch_boundary

    answered = next(
        r.seq
        for r in played.records
        if r.session_id == planner and isinstance(r.event, RoundStarted) and r.event.drained > 1
    )
    rebuilt = replay(
        planner, [r for r in played.records if r.session_id == planner and r.seq < answered]
    )
    assert [m.text for m in rebuilt.mailbox] == list(NOTES)  # they survived the kill
    assert not rebuilt.turn_open
    last_round = played.events(RoundStarted, planner)[-1]
    assert last_round.drained == 2 and all(note in last_round.text for note in NOTES)
    assert not [
        r for r in played.records if isinstance(r.event, MessageQueued) and r.seq > answered
    ]
