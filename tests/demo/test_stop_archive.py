"""stop-archive: stop folds the mailbox into history; archive discards it."""

from __future__ import annotations

from pathlib import Path

from demo_harness import play_json

from halo_actors.agent.repair import UI_INTERRUPTED
from halo_actors.core.events import (
    MailboxDiscarded,
    MailboxFolded,
    RoundStarted,
    SessionArchived,
    SessionStopped,
    ToolReturned,
)
from halo_actors.core.state import replay
from halo_actors.demo.scenarios.stop_archive import NOTES, SCRATCH_NOTES


async def test_stop_folds_the_queued_notes_and_a_later_message_resumes(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "stop-archive")

    writer = played.session_named("writer")
    [fold] = played.events(MailboxFolded, writer)
    assert fold.count == 2 and all(note in fold.text for note in NOTES)
    [stopped] = played.seqs(SessionStopped, writer)
    assert played.seqs(MailboxFolded, writer)[0] < stopped
    cut = [r for r in played.events(ToolReturned, writer) if r.ui_result]
    assert [r.ui_result for r in cut] == [UI_INTERRUPTED]
    later = [r for r in played.records if r.session_id == writer and r.seq > stopped]
    rounds = [r.event for r in later if isinstance(r.event, RoundStarted)]
    assert rounds and rounds[0].text == "go on, please"
    state = replay(writer, [r for r in played.records if r.session_id == writer])
    folded = [m for m in state.messages if m.role == "user" and NOTES[0] in m.text()]
    assert len(folded) == 1 and NOTES[1] in folded[0].text()


async def test_archive_discards_the_mailbox_and_refuses_new_messages(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "stop-archive")

    scratch = played.session_named("writer>scratch")
    assert [d.count for d in played.events(MailboxDiscarded, scratch)] == [2]
    assert played.events(SessionArchived, scratch)
    state = replay(scratch, [r for r in played.records if r.session_id == scratch])
    assert state.lifecycle == "archived" and not state.mailbox
    assert not any(note in m.text() for m in state.messages for note in SCRATCH_NOTES)
    assert played.checks()["a message to the archived session is refused"]
    assert played.tree("at the end")[-1]["state"] == "archived"
