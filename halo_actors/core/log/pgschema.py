"""The PostgreSQL log's tables and every statement it runs, built once per schema.

Everything lives in one schema the caller names (a deployment's, or a test run's own),
so nothing outside it is read or written. Identifiers are composed with
``psycopg.sql`` (never string formatting); values are always bound parameters.

Tables:
- ``events``: one row per record; ``body`` is the record's JSON exactly as
  ``encode_record`` writes it, ``epoch`` the lease epoch it was written under
  (0 when unfenced).
  Two partial indexes, ``events_lifecycle`` (creation, archive and delete records)
  and ``events_messages`` (queued messages), make the session list a few index
  lookups per tree (``pglisting.py``); they index only those records.
- ``log_head``: one row, the last seq handed out and the last ts; its row lock is
  what orders commits (see ``postgres.py``).
- ``leases``: which node owns which tree, under which epoch, until when; ``deleted``
  marks a deleted tree (never taken over; taken again only to create it anew).

A writer's connection holds a session-level advisory lock keyed on the schema
(``writer_lock``): exclusive for a single-writer log, shared for shared-mode nodes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from .filter import EventFilter

SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")
"""Lower-case, short enough that ``<schema>_events`` is a valid channel name."""

NOW_MS = "floor(extract(epoch from clock_timestamp()) * 1000)::bigint"
"""The database's clock in ms: one clock for every node."""

_DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.events (
    seq        BIGINT PRIMARY KEY,
    session_id TEXT   NOT NULL,
    root       TEXT   NOT NULL,
    ts         BIGINT NOT NULL,
    kind       TEXT   NOT NULL,
    epoch      BIGINT NOT NULL DEFAULT 0,
    body       BYTEA  NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_session ON {s}.events (session_id, seq);
CREATE INDEX IF NOT EXISTS events_by_root ON {s}.events (root, seq);
CREATE INDEX IF NOT EXISTS events_by_ts ON {s}.events (ts);
CREATE TABLE IF NOT EXISTS {s}.log_head (
    one      BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    last_seq BIGINT NOT NULL,
    last_ts  BIGINT NOT NULL
);
INSERT INTO {s}.log_head (one, last_seq, last_ts) VALUES (TRUE, 0, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS {s}.leases (
    root       TEXT PRIMARY KEY,
    node       TEXT        NOT NULL,
    epoch      BIGINT      NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
ALTER TABLE {s}.leases ADD COLUMN IF NOT EXISTS deleted BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX IF NOT EXISTS events_lifecycle ON {s}.events (session_id, seq)
    WHERE kind IN ('session_created', 'archived', 'deleted');
CREATE INDEX IF NOT EXISTS events_messages ON {s}.events (session_id, seq)
    WHERE kind = 'message_queued'
"""

_INT64 = (-(1 << 63), (1 << 63) - 1)


def int64(value: int) -> int:
    """A bound past the 64-bit range means the same as its edge."""
    return min(max(value, _INT64[0]), _INT64[1])


Conn = psycopg.Connection[tuple[object, ...]]


def ensure_tables(
    conn: Conn, lock_key: str, relations: Sequence[sql.Identifier], ddl: Sequence[sql.Composed]
) -> None:
    """Run ``ddl`` (idempotent statements) on an autocommit ``conn`` unless every one of
    ``relations`` (the qualified tables and indexes it makes) exists already.

    A schema in use is left alone: no statement runs, so a node starting while others
    write takes none of their locks. (The DDL used to run every time, in one transaction:
    its ``CREATE INDEX IF NOT EXISTS`` held a share lock on ``events`` while its
    ``INSERT … ON CONFLICT`` waited for the head row a writer held, and that writer waited
    for ``events``: a deadlock, and the starting node exited.) Otherwise the statements
    run in order, each in a transaction of its own (none waits while holding another's
    lock), under a session advisory lock on ``lock_key`` so that several nodes can start
    at once; the check is made again under the lock."""
    names = [relation.as_string(conn) for relation in relations]
    check = "SELECT bool_and(to_regclass(name) IS NOT NULL) FROM unnest(%s::text[]) AS name"

    def present() -> bool:
        row = conn.execute(check, (names,)).fetchone()
        return bool(row and row[0])

    if present():
        return
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (lock_key,))
    try:
        if not present():
            for statement in ddl:
                conn.execute(statement)
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock_key,))


_RELATIONS = (
    *("events", "events_by_session", "events_by_root", "events_by_ts", "log_head", "leases"),
    *("events_lifecycle", "events_messages"),
)
"""What ``_DDL`` makes; the last two came with the ``leases.deleted`` column, so a schema
that has them is complete. A later statement must add what it makes here."""


def create_schema(conn: Conn, schema: str) -> None:
    """Create the log's schema and tables if missing (:func:`ensure_tables`)."""
    s = sql.Identifier(schema)
    relations = [sql.Identifier(schema, name) for name in _RELATIONS]
    ddl = [sql.SQL(statement).format(s=s) for statement in _DDL.strip().split(";\n")]
    ensure_tables(conn, f"halo-schema:{schema}", relations, ddl)


@dataclass(frozen=True)
class Statements:
    """The log's statements for one schema."""

    schema: str
    channel: str
    head: sql.Composed
    take_seqs: sql.Composed
    advance_head: sql.Composed
    copy_events: sql.Composed
    notify: sql.SQL
    leases_for_share: sql.Composed
    tail: sql.Composed
    writer_lock: sql.SQL
    writer_lock_shared: sql.SQL

    def select(
        self, flt: EventFilter, after_seq: int, until_seq: int | None, limit: int | None
    ) -> tuple[sql.Composed, list[object]]:
        """The bodies matching ``flt`` in ``(after_seq, until_seq]``, by seq; mirrors
        ``EventFilter.matches`` (the contract suite checks they agree)."""
        where: list[sql.Composable] = [sql.SQL("seq > %s")]
        params: list[object] = [int64(after_seq)]
        if until_seq is not None:
            where.append(sql.SQL("seq <= %s"))
            params.append(int64(until_seq))
        if flt.session_id is not None:
            where.append(sql.SQL("session_id = %s"))
            params.append(flt.session_id)
        if flt.tree is not None:
            where.append(sql.SQL("root = %s"))
            params.append(flt.tree)
        if flt.since_ts is not None:
            where.append(sql.SQL("ts >= %s"))
            params.append(int64(flt.since_ts))
        if flt.kinds is not None:
            where.append(sql.SQL("kind = ANY(%s)"))
            params.append(sorted(flt.kinds))
        query = sql.SQL("SELECT body FROM {}.events WHERE {} ORDER BY seq").format(
            sql.Identifier(self.schema), sql.SQL(" AND ").join(where)
        )
        if limit is not None:
            query += sql.SQL(" LIMIT %s")
            params.append(max(0, int64(limit)))
        return query, params


def tables(schema: str) -> Statements:
    s = sql.Identifier(schema)
    return Statements(
        schema=schema,
        channel=f"{schema}_events",
        head=sql.SQL("SELECT last_seq, last_ts FROM {}.log_head").format(s),
        take_seqs=sql.SQL(
            "UPDATE {}.log_head SET last_seq = last_seq + %s,"
            f" last_ts = GREATEST(last_ts, {NOW_MS}) RETURNING last_seq, last_ts"
        ).format(s),
        advance_head=sql.SQL(
            "UPDATE {}.log_head SET last_seq = %s, last_ts = GREATEST(last_ts, %s)"
            " WHERE last_seq = %s"
        ).format(s),
        copy_events=sql.SQL(
            "COPY {}.events (seq, session_id, root, ts, kind, epoch, body)"
            " FROM STDIN (FORMAT BINARY)"
        ).format(s),
        notify=sql.SQL("SELECT pg_notify(%s, %s)"),
        leases_for_share=sql.SQL(
            "SELECT root, node, epoch FROM {}.leases WHERE root = ANY(%s) FOR SHARE"
        ).format(s),
        tail=sql.SQL("SELECT body FROM {}.events WHERE seq > %s ORDER BY seq LIMIT %s").format(s),
        writer_lock=sql.SQL("SELECT pg_try_advisory_lock(hashtext(%s)::bigint)"),
        writer_lock_shared=sql.SQL("SELECT pg_try_advisory_lock_shared(hashtext(%s)::bigint)"),
    )
