"""stop-archive: stop keeps what was queued; archive discards it.

The writer runs a long command; the user queues two notes, then presses Stop.
The notes are folded into the writer's history as one user turn (nothing is
lost), the command's process group dies, and a later message starts a new run
that resumes the work with the notes in its history. Then the writer starts a
scratch sub-session, the user queues messages to it and archives it: its
mailbox is discarded, it is read-only, and a message to it is refused.
"""

from __future__ import annotations

from ...agent.repair import UI_INTERRUPTED
from ...agent.scripted import Rule, Script, ScriptedModel, Step
from ...core.errors import SessionUnavailable
from ...core.events import (
    MailboxDiscarded,
    MailboxFolded,
    Record,
    RoundStarted,
    SessionCreated,
    SessionStopped,
    ToolCalled,
    ToolReturned,
)
from ...core.state import SessionState
from ...runtime.profiles import Profiles
from ...runtime.supervisor import Supervisor
from ..feed import one_line
from ..scenario import Scenario
from ..stage import Stage
from .common import profile, shell, start

NOTES = ("mention the new --plain flag", "keep it under one page")
SCRATCH_NOTES = ("try a two-column layout", "and a dark theme")
WRITER = Script(
    rules=(
        Rule(
            match="draft the release notes",
            steps=(
                Step(text="Drafting.\n", calls=(shell("sleep 30 && echo drafted"),)),
                Step(text="The draft is ready."),
            ),
        ),
        Rule(
            match="go on",
            steps=(
                Step(
                    text="Picking the draft up again, with your two notes from before the stop.",
                    chunk=14,
                ),
            ),
        ),
        Rule(
            match="try a layout experiment",
            steps=(
                Step(
                    calls=(start("experiment with the layout", agent="scratch", label="scratch"),)
                ),
                Step(text="A scratch session is experimenting."),
            ),
        ),
    )
)
SCRATCH = Script(
    rules=(Rule(steps=(Step(calls=(shell("sleep 30 && echo tried"),)), Step(text="Tried it."))),)
)
PROFILES = Profiles(
    {
        "writer": profile("writer", "scratch", description="writes documents"),
        "scratch": profile("scratch", description="tries things out"),
    }
)


async def _stop_part(stage: Stage, sup: Supervisor, writer: str) -> None:
    await stage.note("the user asks for release notes; the writer runs a long command")
    await sup.send(writer, "draft the release notes")
    await stage.wait_event(writer, ToolCalled, what="the writer's command")
    for text in NOTES:
        await stage.note(f"while it runs, the user sends {text!r}")
        await sup.send(writer, text)
    await stage.snapshot("before the stop", sup.sessions())
    await stage.note("the user presses Stop")
    await sup.stop(writer)
    await _show_history(stage, sup.state(writer))
    await stage.note("later, the user sends 'go on, please': a new run resumes the work")
    await sup.send(writer, "go on, please")
    await stage.wait_idle(sup, writer)


async def _show_history(stage: Stage, state: SessionState) -> None:
    lines = [f"{m.role}: {one_line(m.text() or '[tool call/result]', 80)}" for m in state.messages]
    await stage.note("the writer's history now ends with:\n     " + "\n     ".join(lines[-3:]))


async def _archive_part(stage: Stage, sup: Supervisor, writer: str) -> str:
    await sup.send(writer, "try a layout experiment")
    created = await stage.wait_record(
        "the scratch session",
        lambda r: isinstance(r.event, SessionCreated) and r.session_id != writer,
    )
    scratch = created.session_id
    await stage.wait_event(scratch, ToolCalled, what="the scratch command")
    for text in SCRATCH_NOTES:
        await sup.send(scratch, text)
    await stage.snapshot("before the archive", sup.sessions())
    await stage.note("the user archives the scratch session")
    await sup.archive(scratch)
    try:
        await sup.send(scratch, "are you there?")
        refused = ""
    except SessionUnavailable as exc:
        refused = str(exc)
    await stage.note(f"a message to it now: refused with {refused!r}")
    await stage.check("a message to the archived session is refused", "archived" in refused)
    await stage.wait_idle(sup, writer)
    await stage.snapshot("at the end", sup.sessions())
    return scratch


async def play(stage: Stage) -> None:
    model = ScriptedModel({"writer": WRITER, "scratch": SCRATCH})
    async with stage.runtime(model, PROFILES) as sup:
        writer = await sup.create_session(namespace="demo", agent_id="writer", title="writer")
        await _stop_part(stage, sup, writer)
        await _check_stop(stage, sup.state(writer), await stage.records(writer))
        scratch = await _archive_part(stage, sup, writer)
        await _check_archive(stage, sup.state(scratch), await stage.records(scratch))


async def _check_stop(stage: Stage, state: SessionState, records: list[Record]) -> None:
    folds = [r for r in records if isinstance(r.event, MailboxFolded)]
    fold = folds[0].event if folds else None
    await stage.check(
        "stop folded both queued notes into one history turn (mailbox_folded)",
        isinstance(fold, MailboxFolded)
        and fold.count == 2
        and any(all(n in m.text() for n in NOTES) for m in state.messages if m.role == "user"),
    )
    cut = [r.event for r in records if isinstance(r.event, ToolReturned) and r.event.ui_result]
    await stage.check(
        "stop cut the running command: [interrupted by user]",
        [c.ui_result for c in cut] == [UI_INTERRUPTED],
    )
    stopped = next((r.seq for r in records if isinstance(r.event, SessionStopped)), None)
    later = [
        r for r in records if isinstance(r.event, RoundStarted) and stopped and r.seq > stopped
    ]
    await stage.check(
        "a later message started a new run that resumed the work",
        len(later) == 1 and state.lifecycle == "live" and "Picking" in state.last_output,
    )


async def _check_archive(stage: Stage, state: SessionState, records: list[Record]) -> None:
    discards = [r.event for r in records if isinstance(r.event, MailboxDiscarded)]
    await stage.check(
        "archive discarded the two queued messages (mailbox_discarded)",
        [d.count for d in discards] == [2] and state.lifecycle == "archived",
    )
    await stage.check(
        "the discarded messages never reached the scratch session's history",
        not any(n in m.text() for m in state.messages for n in SCRATCH_NOTES),
    )


SCENARIO = Scenario(
    name="stop-archive",
    title="stop folds queued messages into history; archive discards them",
    play=play,
    shown=(
        "stop folded the whole mailbox into history as one user turn: nothing queued was lost",
        "stop killed the running command's process group and left the session idle",
        "a later message started a new run that resumed the work",
        "archive discarded the mailbox, killed the command and made the session read-only",
    ),
    docs=("docs/design/actors.md (Stop, archive, delete)", "docs/demo.md"),
)
