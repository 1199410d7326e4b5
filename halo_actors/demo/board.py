"""The demo's picture of a session tree, folded from the events it has seen.

A :class:`Board` applies every record it is shown to a :class:`SessionState`
with the runtime's own fold (``SessionState.apply``), so what the view draws is
exactly what a restart would rebuild, whether the records come from an
in-process log or from a subprocess's JSON lines. :func:`rows_of` turns states
(the board's, or a supervisor's after a restart) into display rows.

Invariants: rows list parents before children; a session's display name is its
path of titles (``lead>docs>spell``), built from ``session_created`` facts, never
by slicing ids; deleted sessions are not shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..core.events import Record, RoundStarted, SessionCreated, TextStreamed
from ..core.state import SessionState, UiEntry

TAIL = 48
"""Characters of the latest streamed text kept per session (the live view shows them)."""


@dataclass(frozen=True)
class Row:
    """One line of the tree: what a session is doing right now."""

    session_id: str
    name: str
    """The display path (``lead>docs>spell``)."""
    label: str
    """The session's own title (or agent id when it has none)."""
    depth: int
    agent: str
    state: str
    """``idle``, ``running``, ``in tool``, ``stopped`` or ``archived``."""
    tool: str
    """The pending tool call (``shell_exec: sleep 60 && echo done``), or empty."""
    queued: int
    saying: str = ""


def state_of(state: SessionState) -> str:
    if state.turn_open:
        return "in tool" if _pending_tool(state) is not None else "running"
    return "idle" if state.lifecycle == "live" else state.lifecycle


def describe_call(tool_name: str, tool_input: dict[str, object] | None) -> str:
    """A one-line picture of a tool call: the command, the task or the target."""
    args = tool_input or {}
    for key in ("command", "task", "session_id", "path", "pattern"):
        value = args.get(key)
        if isinstance(value, str):
            return f"{tool_name}: {value}"
    return tool_name


def _pending_tool(state: SessionState) -> UiEntry | None:
    pending = [u for u in state.ui if u.kind == "tool" and u.output is None]
    return pending[-1] if pending else None


def _names(states: Iterable[SessionState]) -> dict[str, str]:
    by_id = {s.session_id: s for s in states}
    names: dict[str, str] = {}

    def name(sid: str) -> str:
        if sid not in names:
            state = by_id[sid]
            own = state.title or state.agent_id
            parent = state.parent_id
            names[sid] = f"{name(parent)}>{own}" if parent in by_id else own
        return names[sid]

    for sid in by_id:
        name(sid)
    return names


def rows_of(states: Iterable[SessionState], saying: dict[str, str] | None = None) -> list[Row]:
    """Display rows, parents before children, in creation order among siblings."""
    shown = [s for s in states if s.created_ts and s.lifecycle != "deleted"]
    names = _names(shown)
    children: dict[str | None, list[SessionState]] = {}
    for state in sorted(shown, key=lambda s: (s.created_ts, s.session_id)):
        parent = state.parent_id if state.parent_id in names else None
        children.setdefault(parent, []).append(state)
    rows: list[Row] = []

    def walk(parent: str | None, depth: int) -> None:
        for state in children.get(parent, []):
            tool = _pending_tool(state) if state.turn_open else None
            rows.append(
                Row(
                    session_id=state.session_id,
                    name=names[state.session_id],
                    label=state.title or state.agent_id,
                    depth=depth,
                    agent=state.agent_id,
                    state=state_of(state),
                    tool=describe_call(tool.tool_name, tool.tool_input) if tool else "",
                    queued=len(state.mailbox),
                    saying=(saying or {}).get(state.session_id, "") if state.turn_open else "",
                )
            )
            walk(state.session_id, depth + 1)

    walk(None, 0)
    return rows


class Board:
    """Session states folded from the records shown to it (in seq order)."""

    def __init__(self) -> None:
        self.states: dict[str, SessionState] = {}
        self._saying: dict[str, str] = {}
        self._names: dict[str, str] = {}

    def apply(self, record: Record) -> None:
        state = self.states.get(record.session_id)
        if state is None:
            state = self.states[record.session_id] = SessionState(record.session_id)
        state.apply(record)
        if isinstance(record.event, TextStreamed):
            said = self._saying.get(record.session_id, "") + record.event.text
            self._saying[record.session_id] = said.replace("\n", " ")[-TAIL:]
        elif isinstance(record.event, RoundStarted):
            self._saying.pop(record.session_id, None)
        if isinstance(record.event, SessionCreated):
            self._names = _names(self.states.values())

    def name(self, session_id: str) -> str:
        """The display path of a session (its id when the board never saw it created)."""
        return self._names.get(session_id, session_id)

    def rows(self) -> list[Row]:
        return rows_of(self.states.values(), self._saying)
