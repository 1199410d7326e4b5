"""The reference model of suite 3: the tree rules, checked over one example's log.

The model knows the rules of ``/work/shared/spec/runtime.md`` and
``docs/design/gates.md``, not the runtime's code. It reads the driver's
:class:`~tree_journal.Journal` and every record of the log once the runtime has
settled, and places each operation in the log by sequence numbers: a direct call
between the last seq before it and the last seq after it, a session tool call
between its ``tool_call`` and its ``tool_result``. Where an outcome depends on an
interleaving the model cannot see (an archive racing a gated call), it accepts
exactly the answers some order allows, and nothing else.

Facts derived here (``tree_answers.py`` checks the gated answers with them):

- a **cascade** is a stop, archive or delete that ran: a direct one that was not
  refused, or a ``stop_session``/``archive_session`` answered ``code 0`` (or cut, when
  it may have started);
- a session is **gone by** seq ``n`` when an archive or delete covering it had
  returned by ``n``; it **may be gone from** the earliest start of such a cascade.
  Archived and deleted are absorbing: nothing ever brings a session back.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tree_journal import Journal

from halo_actors.core import ids
from halo_actors.core.events import (
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
    Record,
    RoundStarted,
    SessionCreated,
    ToolCalled,
    ToolReturned,
    kind_of,
)

NEVER = 1 << 62
"""A sequence number after every record."""


@dataclass(frozen=True)
class Violation:
    rule: str
    session: str
    detail: str
    target: str = ""
    """The other session the rule is about (a call's target), if any."""

    def __str__(self) -> str:
        return f"[{self.rule}] {self.session}: {self.detail}"


@dataclass(frozen=True)
class Cascade:
    how: str
    """``stop``, ``archive`` or ``delete``."""
    target: str
    start: int
    end: int | None
    """None when a cut tool call asked for it: it may or may not have run."""
    source: str | None
    """None for the driver, else the session whose tool call asked for it."""

    def covers(self, session_id: str) -> bool:
        return ids.is_in_subtree(session_id, self.target)


@dataclass
class Call:
    """One session tool call found in the log."""

    caller: str
    seq: int
    called: ToolCalled
    results: list[tuple[int, ToolReturned]] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.results[0][0] if self.results else NEVER


class Checks:
    """Counts every invariant evaluated and keeps the ones that failed."""

    def __init__(self) -> None:
        self.count = 0
        self.violations: list[Violation] = []

    def expect(self, ok: bool, rule: str, session: str, detail: str, target: str = "") -> bool:
        self.count += 1
        if not ok:
            self.violations.append(Violation(rule, session, detail, target))
        return ok


class TreeModel:
    """The log of one example, indexed, with the model's derived facts."""

    def __init__(self, journal: Journal, records: list[Record], checks: Checks) -> None:
        self.journal = journal
        self.checks = checks
        self.records = sorted(records, key=lambda r: r.seq)
        self.of: dict[str, list[Record]] = defaultdict(list)
        self.created: dict[str, tuple[int, SessionCreated]] = {}
        self.calls: dict[str, Call] = {}
        for record in self.records:
            self._index(record)
        self.cascades: list[Cascade] = []
        self.escaped: set[str] = set()
        """Sessions created under a cascade's target while it ran and missed by it."""

    def _index(self, record: Record) -> None:
        sid, event = record.session_id, record.event
        self.of[sid].append(record)
        match event:
            case SessionCreated():
                self.checks.expect(sid not in self.created, "created_twice", sid, "")
                self.created.setdefault(sid, (record.seq, event))
            case ToolCalled():
                fresh = event.tool_use_id not in self.calls
                self.checks.expect(fresh, "call_ran_twice", sid, event.tool_use_id)
                self.calls.setdefault(event.tool_use_id, Call(sid, record.seq, event))
            case ToolReturned() if event.tool_use_id in self.calls:
                self.calls[event.tool_use_id].results.append((record.seq, event))
            case _:
                pass

    # --- derived facts ------------------------------------------------------------

    def first(self, session_id: str, kind: str) -> int:
        """Seq of the session's first record of ``kind``, or NEVER."""
        found = (r.seq for r in self.of.get(session_id, ()) if kind_of(r.event) == kind)
        return next(found, NEVER)

    def created_at(self, session_id: str) -> int:
        made = self.created.get(session_id)
        return made[0] if made else NEVER

    def gone_by(self, session_id: str, hows: tuple[str, ...] = ("archive", "delete")) -> int:
        """Seq by which an archive/delete covering the session had surely returned."""
        born = self.created_at(session_id)
        ends = [
            c.end
            for c in self.cascades
            if c.how in hows and c.end is not None and born < c.end and c.covers(session_id)
        ]
        return min(ends, default=NEVER)

    def maybe_gone_from(
        self, session_id: str, hows: tuple[str, ...] = ("archive", "delete")
    ) -> int:
        """Seq from which the session may have been archived or deleted."""
        starts = [c.start for c in self.cascades if c.how in hows and c.covers(session_id)]
        kinds = ("deleted",) if hows == ("delete",) else ("archived", "deleted")
        return min([*starts, *(self.first(session_id, k) for k in kinds)], default=NEVER)

    def cascading(self, session_id: str, start: int, end: int) -> bool:
        """Whether a cascade covering the session may have run between ``start`` and ``end``
        (a session being stopped refuses new children)."""
        return any(
            c.covers(session_id) and c.start < end and (c.end is None or c.end > start)
            for c in self.cascades
        )

    def hard_hits(self, session_id: str) -> list[int]:
        """Seqs at which something may have aborted this session's turn."""
        hits = [c.start for c in self.cascades if c.covers(session_id)]
        hits += [
            op.start
            for op in self.journal.ops
            if op.verb == "interrupt" and op.target == session_id and not op.refused
        ]
        for call_id, call in self.calls.items():
            planned = self.journal.planned.get(call_id)
            hard = planned is not None and (
                planned.tool == "interrupt_session"
                or (planned.tool == "query_session" and planned.arguments.get("interrupt") is True)
            )
            if hard and planned is not None and planned.target == session_id:
                hits.append(call.seq)
        return hits

    def in_tree(self, root: str) -> list[str]:
        return [s for s in self.created if ids.root_of(s) == root]


def mailbox_accounting(records: list[Record]) -> tuple[int, int]:
    """(messages queued, messages drained + folded + discarded) over a session's records."""
    queued = taken = 0
    for record in records:
        match record.event:
            case MessageQueued():
                queued += 1
            case RoundStarted() as e:
                taken += e.drained
            case MailboxFolded() as e:
                taken += e.count
            case MailboxDiscarded() as e:
                taken += e.count
            case _:
                pass
    return queued, taken
