"""What one group commit of the PostgreSQL log does inside its transaction.

The writer thread of ``postgres.py`` calls these on its own connection, inside one
transaction per batch. Two kinds of batch, one per mode of the log:

- :class:`Pending` (shared mode): the records have no seq yet; :func:`insert_taking_seqs`
  takes ``n`` seqs from the ``log_head`` row (``UPDATE … RETURNING``), whose row lock
  is held until commit, so seqs are handed out in commit order across every node.
- :class:`Stamped` (single-writer mode): the records were stamped on the trio thread;
  :func:`insert_stamped` moves the head from exactly the seq before the batch to its
  last seq (compare-and-set under the same row lock). If the head is anywhere else,
  another writer took seqs (the deployment broke the single-writer rule): it raises
  :class:`HeadMoved` and the transaction stores nothing.

Invariants:
- both take the head row lock before inserting, so commits (of either mode, on any
  node) are serialised and the committed seqs are always ``1..head`` with no hole;
- :func:`fence` share-locks the lease rows of the batch's trees for the rest of the
  transaction, so a takeover's epoch bump waits for the commit in flight;
- every row's ``body`` is the record's JSON exactly as ``encode_record`` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
import trio

from ..errors import Fenced, StoreFailed
from ..events import Event, Record, kind_of
from ..ids import root_of
from .pgschema import Statements

Cursor = psycopg.Cursor[tuple[object, ...]]
COLUMN_TYPES = ["int8", "text", "text", "int8", "text", "int8", "bytea"]
"""The ``events`` columns ``copy_events`` writes, for a binary ``COPY``."""


def record_body(seq: int, session_id: str, ts: int, event_body: bytes) -> bytes:
    """The stored JSON of a record, exactly as ``encode_record`` writes it (a test pins it).
    Session ids are safe segments, so they need no escaping."""
    return b'{"seq":%d,"sessionId":"%s","ts":%d,"event":%s}' % (
        seq,
        session_id.encode(),
        ts,
        event_body,
    )


@dataclass(eq=False)
class Pending:
    """One shared-mode ``append``: its events, waiting for seqs from the commit."""

    session_id: str
    events: tuple[Event, ...]
    bodies: list[bytes]
    epoch: int | None
    records: list[Record] = field(default_factory=list)
    done: trio.Event = field(default_factory=trio.Event)
    error: BaseException | None = None

    @property
    def size(self) -> int:
        return len(self.bodies)


@dataclass(eq=False, slots=True)
class Stamped:
    """One single-writer ``append_nowait``: records already stamped, and their bodies."""

    session_id: str
    records: list[Record]
    bodies: list[bytes]
    epoch: int | None

    @property
    def size(self) -> int:
        return len(self.records)


class HeadMoved(StoreFailed):
    """A single-writer commit found the head where this node did not leave it."""


def fence(cur: Cursor, sql: Statements, node_id: str, batch: list[Pending]) -> list[Pending]:
    """The appends whose epoch is still this node's (all of them when not fencing); the
    stale ones get a ``Fenced`` error. The lease rows stay share-locked until commit."""
    current = _current_epochs(cur, sql, [p.session_id for p in batch if p.epoch is not None])
    accepted = []
    for pending in batch:
        if pending.epoch is not None:
            root = root_of(pending.session_id)
            if current.get(root) != (node_id, pending.epoch):
                pending.error = Fenced(
                    f"tree {root!r}: epoch {pending.epoch} of {node_id} is stale"
                )
                continue
        accepted.append(pending)
    return accepted


def fence_stamped(cur: Cursor, sql: Statements, node_id: str, batch: list[Stamped]) -> None:
    """Raise ``Fenced`` if any append of the batch carries an epoch that is not current
    (single-writer mode cannot drop one append: the seqs after it are already out)."""
    current = _current_epochs(cur, sql, [p.session_id for p in batch if p.epoch is not None])
    for item in batch:
        if item.epoch is not None and current.get(root_of(item.session_id)) != (
            node_id,
            item.epoch,
        ):
            raise Fenced(
                f"tree {root_of(item.session_id)!r}: epoch {item.epoch} of {node_id} is stale"
            )


def _current_epochs(
    cur: Cursor, sql: Statements, sessions: list[str]
) -> dict[str, tuple[str, int]]:
    roots = sorted({root_of(s) for s in sessions})
    if not roots:
        return {}
    cur.execute(sql.leases_for_share, (roots,))
    return {str(root): (str(node), int(epoch)) for root, node, epoch in cur.fetchall()}  # type: ignore[call-overload]


def insert_taking_seqs(cur: Cursor, sql: Statements, node_id: str, batch: list[Pending]) -> None:
    """Shared mode: take the batch's seqs from the head (in commit order), insert, notify.
    Each ``Pending`` gets its ``records``."""
    count = sum(p.size for p in batch)
    cur.execute(sql.take_seqs, (count,))
    row = cur.fetchone()
    assert row is not None
    last, ts = int(row[0]), int(row[1])  # type: ignore[call-overload]
    seq = last - count
    with cur.copy(sql.copy_events) as copy:
        copy.set_types(COLUMN_TYPES)
        for pending in batch:
            root = root_of(pending.session_id)
            epoch = pending.epoch or 0
            for event, event_body in zip(pending.events, pending.bodies, strict=True):
                seq += 1
                body = record_body(seq, pending.session_id, ts, event_body)
                copy.write_row((seq, pending.session_id, root, ts, kind_of(event), epoch, body))
                pending.records.append(
                    Record(seq=seq, session_id=pending.session_id, ts=ts, event=event)
                )
    cur.execute(sql.notify, (sql.channel, f"{node_id}:{last}"))


def insert_stamped(cur: Cursor, sql: Statements, node_id: str, batch: list[Stamped]) -> None:
    """Single-writer mode: move the head from just before the batch to its end
    (compare-and-set), insert the stamped rows, notify. ``HeadMoved`` if the head was
    not where this node left it (nothing is stored: the caller's transaction rolls back)."""
    first = batch[0].records[0].seq
    last_record = batch[-1].records[-1]
    cur.execute(sql.advance_head, (last_record.seq, last_record.ts, first - 1))
    if cur.rowcount != 1:
        raise HeadMoved(
            f"another writer took seqs of schema {sql.schema!r} (the head is past"
            f" {first - 1}): a single-writer log must be the schema's only writer"
        )
    with cur.copy(sql.copy_events) as copy:
        copy.set_types(COLUMN_TYPES)
        for item in batch:
            root = root_of(item.session_id)
            epoch = item.epoch or 0
            for record, body in zip(item.records, item.bodies, strict=True):
                copy.write_row(
                    (
                        record.seq,
                        item.session_id,
                        root,
                        record.ts,
                        kind_of(record.event),
                        epoch,
                        body,
                    )
                )
    cur.execute(sql.notify, (sql.channel, f"{node_id}:{last_record.seq}"))
