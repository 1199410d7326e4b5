"""Which records a read or a subscription wants: one session, one tree, or all.

Invariant: ``EventFilter.matches`` is the single definition of membership; the
SQLite backend's WHERE clause and the fan-out index are derived from the same
fields and must agree with it (the contract suite checks both backends).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..events import Record
from ..ids import check_session_id, is_root, root_of


@dataclass(frozen=True, slots=True)
class EventFilter:
    """``session_id``: exactly that session. ``tree``: every session whose root is ``tree``.
    ``since_ts``: only records stamped at or after this time (ms). ``kinds``: only these tags.
    Fields combine with AND; an empty filter matches everything."""

    session_id: str | None = None
    tree: str | None = None
    since_ts: int | None = None
    kinds: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.session_id is not None:
            check_session_id(self.session_id)
        if self.tree is not None:
            check_session_id(self.tree)
            if not is_root(self.tree):
                object.__setattr__(self, "tree", root_of(self.tree))

    def matches(self, record: Record) -> bool:
        if self.session_id is not None and record.session_id != self.session_id:
            return False
        if self.tree is not None and root_of(record.session_id) != self.tree:
            return False
        if self.since_ts is not None and record.ts < self.since_ts:
            return False
        return self.kinds is None or record.event.__struct_config__.tag in self.kinds


EVERYTHING = EventFilter()
