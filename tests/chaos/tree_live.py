"""Suite 3: the live runtime once it has settled, and a supervisor restarted from its log.

- nothing is left running: no run, no open turn, no supervisor task (run, report or
  cascade), no message stranded in a mailbox of a session that is not archived;
- no orphan: every session's parent is still registered;
- every conversation answers each tool call exactly once, right after it;
- state rebuilt from the log equals the live state, for every session;
- each tree lists exactly its sessions that are not archived;
- a new supervisor recovered from the same log holds the same sessions in the same
  states (and a shutdown after settling wrote nothing).
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio
from tree_journal import Journal
from tree_model import Checks

from halo_actors.agent.model import Model
from halo_actors.core import ids
from halo_actors.core.log import EventFilter, EventLog
from halo_actors.core.state import SessionState, replay
from halo_actors.runtime.profiles import Profiles
from halo_actors.runtime.supervisor import Supervisor, open_supervisor
from halo_actors.runtime.workers import PARKED
from halo_actors.tools.files import Workspace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from runtime_harness import assert_every_tool_use_answered_once


def supervisor_tasks() -> list[trio.lowlevel.Task]:
    """Tasks in the nurseries the current task holds open: under ``open_supervisor`` (which
    opens its nursery in the caller's task) these are the supervisor's runs and cascades
    (not its one permanent task, the watcher that stops it if the log fails, nor the run
    workers parked between runs)."""
    me = trio.lowlevel.current_task()
    return [
        task
        for nursery in me.child_nurseries
        for task in nursery.child_tasks
        if not task.name.endswith("stop_on_log_failure") and task.custom_sleep_data is not PARKED
    ]


async def check_live(sup: Supervisor, log: EventLog, journal: Journal, checks: Checks) -> None:
    expect = checks.expect
    registered = {s.session_id: s for s in sup.sessions()}
    expect(not supervisor_tasks(), "tasks_left", "-", str(supervisor_tasks()))
    for sid, state in registered.items():
        expect(not sup.is_running(sid), "still_running", sid, "")
        expect(not state.turn_open and not state.is_compacting, "turn_left_open", sid, "")
        if state.lifecycle != "archived":
            expect(not state.mailbox, "mailbox_stranded", sid, f"{len(state.mailbox)} queued")
        parent = ids.parent_of(sid)
        expect(parent is None or parent in registered, "orphan", sid, f"parent {parent} is gone")
        try:
            assert_every_tool_use_answered_once(state.messages)
        except AssertionError as exc:
            expect(False, "tool_use_unanswered", sid, str(exc))
        else:
            checks.count += 1
        records = await log.read(EventFilter(session_id=sid))
        expect(replay(sid, records) == state, "replay_differs", sid, "")
    for root in journal.tags:
        if root not in registered:
            continue
        listed = {str(row["sessionId"]) for row in sup.describe_tree(root)}
        wanted = {
            s
            for s, st in registered.items()
            if ids.root_of(s) == root and st.lifecycle != "archived"
        }
        for sid in sorted(listed | wanted):
            where = "listed, not a live session" if sid not in wanted else "live, not listed"
            expect(sid in listed and sid in wanted, "tree_listing", sid, where, root)


async def check_restart(
    log: EventLog,
    model: Model,
    workspace: Path,
    profiles: Profiles,
    live: dict[str, SessionState],
    checks: Checks,
) -> None:
    async with open_supervisor(
        log, model, workspace=Workspace(workspace), profiles=profiles
    ) as again:
        restored = {s.session_id: s for s in again.sessions()}
        for sid in sorted(set(restored) | set(live)):
            if sid not in restored or sid not in live:
                where = "only before" if sid in live else "only after"
                checks.expect(False, "restart_sessions", sid, f"registered {where} the restart")
            else:
                checks.expect(restored[sid] == live[sid], "restart_differs", sid, "")
