"""``history``: a workspace's event log read offline, with no server.

The log (``<workspace>/.halo/events.db``) is opened read-only, so a running server
is not disturbed and nothing is created. Every session's state is rebuilt with the
runtime's own fold (``SessionState.apply``), as a restart would.

- no session named: the workspace's root sessions, newest first (id, title, state,
  how many sessions the tree has, last update);
- a session named (root or child): its whole tree (each node's state, pending call,
  queued count), then that session's transcript: messages, replies, tool calls with
  their results (or ``pending``), errors and notices, wrapped to the terminal width.

``--json`` prints the same as one JSON document. Errors (no log, unknown session)
raise :class:`HistoryError` with a message for the person.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from ..core import ids
from ..core.log import SqliteEventLog
from ..core.state import SessionState, UiEntry
from ..demo.board import describe_call, rows_of, state_of
from ..demo.view import row_json, tree_lines
from ..runtime.embed import log_path

OUTPUT_SHOWN = 12
"""Lines of a tool result shown in the text transcript (all of them with --json)."""


class HistoryError(Exception):
    pass


async def load(workspace: Path) -> dict[str, SessionState]:
    """Every session of the workspace, folded from its log (read-only)."""
    db = log_path(workspace)
    if not db.is_file():
        raise HistoryError(f"no event log in {workspace} (looked for {db})")
    log = await SqliteEventLog.open(db, read_only=True)
    try:
        records = await log.read()
    finally:
        await log.aclose()
    states: dict[str, SessionState] = {}
    for record in records:
        states.setdefault(record.session_id, SessionState(record.session_id)).apply(record)
    return {sid: s for sid, s in states.items() if s.created_ts}


def roots(states: dict[str, SessionState]) -> list[SessionState]:
    found = [s for s in states.values() if ids.is_root(s.session_id) and s.lifecycle != "deleted"]
    return sorted(found, key=lambda s: s.updated_ts, reverse=True)


def tree_of(states: dict[str, SessionState], session_id: str) -> list[SessionState]:
    if session_id not in states:
        raise HistoryError(f"no session {session_id} in this workspace")
    root = ids.root_of(session_id)
    return [s for s in states.values() if ids.root_of(s.session_id) == root]


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def list_text(states: dict[str, SessionState], width: int) -> list[str]:
    rows = roots(states)
    if not rows:
        return ["no sessions in this workspace"]
    lines = [f"{len(rows)} root session(s), newest first:"]
    for state in rows:
        size = len(tree_of(states, state.session_id))
        head = f"{_when(state.updated_ts)}  {state_of(state):<8} {size:>3} session(s)  "
        lines.append(_clip(head + state.session_id, width))
        if state.title or state.description:
            lines.append(_clip(f"    {state.title or state.description}", width))
    return lines


def session_text(states: dict[str, SessionState], session_id: str, width: int) -> list[str]:
    tree = tree_of(states, session_id)
    lines = [_clip(f"── tree of {ids.root_of(session_id)}", width)]
    lines += [_clip("  " + line, width) for line in tree_lines(rows_of(tree))]
    lines.append(_clip(f"── transcript of {session_id}", width))
    for entry in states[session_id].ui:
        lines += _entry_text(entry, width)
    return lines


def _wrapped(prefix: str, text: str, width: int) -> list[str]:
    out: list[str] = []
    indent = " " * len(prefix)
    for i, paragraph in enumerate(text.splitlines() or [""]):
        first = prefix if i == 0 else indent
        out += textwrap.wrap(
            paragraph,
            width=max(20, width),
            initial_indent=first,
            subsequent_indent=indent,
            replace_whitespace=False,
            drop_whitespace=True,
        ) or [first.rstrip()]
    return out


def _entry_text(entry: UiEntry, width: int) -> list[str]:
    stamp = time.strftime("%H:%M:%S", time.localtime(entry.ts / 1000)) if entry.ts else "--:--:--"
    match entry.kind:
        case "tool":
            head = _wrapped(f"{stamp} ⚙ ", describe_call(entry.tool_name, entry.tool_input), width)
            if entry.output is None:
                return [*head, "           … pending (no result logged)"]
            output = entry.output.splitlines() or [""]
            shown = [_clip("           │ " + line, width) for line in output[:OUTPUT_SHOWN]]
            if len(output) > OUTPUT_SHOWN:
                shown.append(f"           │ … {len(output) - OUTPUT_SHOWN} more line(s)")
            return head + shown
        case "user":
            return _wrapped(f"{stamp} you › ", entry.text, width)
        case "assistant":
            return _wrapped(f"{stamp} ai  › ", entry.text, width)
        case "error":
            return _wrapped(f"{stamp} !   ", entry.text, width)
        case _:
            return _wrapped(f"{stamp} ·   ", entry.text, width)


def list_json(workspace: Path, states: dict[str, SessionState]) -> dict[str, object]:
    return {
        "workspace": str(workspace),
        "sessions": [
            {
                "sessionId": s.session_id,
                "title": s.title or s.description,
                "state": state_of(s),
                "updatedAt": s.updated_ts,
                "size": len(tree_of(states, s.session_id)),
            }
            for s in roots(states)
        ],
    }


def session_json(states: dict[str, SessionState], session_id: str) -> dict[str, object]:
    tree = tree_of(states, session_id)
    return {
        "sessionId": session_id,
        "root": ids.root_of(session_id),
        "tree": [row_json(row) for row in rows_of(tree)],
        "transcript": [_entry_json(e) for e in states[session_id].ui],
    }


def _entry_json(entry: UiEntry) -> dict[str, object]:
    out: dict[str, object] = {"kind": entry.kind, "seq": entry.seq, "ts": entry.ts}
    if entry.kind == "tool":
        out |= {
            "toolName": entry.tool_name,
            "toolUseId": entry.tool_use_id,
            "toolInput": entry.tool_input or {},
            "output": entry.output,
        }
    else:
        out["text"] = entry.text
    return out
