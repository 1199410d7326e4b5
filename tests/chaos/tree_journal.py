"""What the driver of suite 3 did, as the reference model reads it (``tree_model.py``).

Every direct call is journaled with the log's sequence number just before it was
made and just after it returned, so the model can place it among the log's
records; every session tool call a session will make is journaled when the driver
scripts it (a :class:`Planned` call, found again in the log by its tool-use id).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from halo_actors.core import ids

DIRECT_VERBS = ("send", "interrupt", "start_child", "stop", "archive", "delete")


@dataclass(frozen=True)
class DirectOp:
    """One call the driver made on the supervisor (as the HTTP front would)."""

    verb: str
    target: str
    start: int
    """The log's last sequence number before the call."""
    end: int
    """The log's last sequence number after it returned."""
    outcome: str
    """``started``/``queued`` (a delivery), ``created`` (start_child), ``true``/``false``
    (stop, archive, delete), or the refusal: ``not_found``, ``unavailable``, ``invalid``."""
    created: str | None = None
    """The child a ``start_child`` created."""

    @property
    def refused(self) -> bool:
        return self.outcome in ("not_found", "unavailable", "invalid")


@dataclass(frozen=True)
class Planned:
    """A session tool call scripted into a message to ``caller``."""

    call_id: str
    caller: str
    tool: str
    target: str | None
    """None for ``list_sessions`` and ``start_session``."""
    arguments: dict[str, object]
    relation: str


@dataclass
class Journal:
    tags: dict[str, str] = field(default_factory=dict)
    """Root id -> the tag every output of that tree carries."""
    ops: list[DirectOp] = field(default_factory=list)
    planned: dict[str, Planned] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    """Every session id seen so far, in the order first seen (deleted ones too)."""

    def tag_of(self, session_id: str) -> str:
        return self.tags.get(ids.root_of(session_id), "[tree?]")

    def see(self, session_ids: list[str]) -> None:
        known = set(self.seen)
        self.seen.extend(s for s in session_ids if s not in known)
