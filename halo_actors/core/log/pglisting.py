"""Listing the trees of a shared PostgreSQL log: what every node answers the same.

With several nodes sharing one log (``serve --store``), a node has loaded only the
trees it owns, so a session list built from its own runtime would show only those.
These statements list every tree from the database instead, on whichever node runs
them. See ``docs/design/postgres.md`` (Any node serves any request).

Invariants:
- the trees are the rows of ``leases``: in a node deployment every tree takes its
  lease before its first record (an append to a tree not held is refused), and a
  lease row is never deleted; a row marked ``deleted`` is a deleted tree and is
  never listed;
- a root is listed while its last lifecycle record (``session_created``,
  ``archived``, ``deleted``) is its creation, as ``SessionState`` folds it;
  ``updated`` is the ``ts`` of the root session's last record, its ``updated_ts``;
- the title is the one ``SessionState`` gives: the creation's ``title``, else the
  first of the next queued messages that yields one (``title_from``; the first
  ``TITLE_MESSAGES`` are looked at), else the creation's ``description``.
"""

from __future__ import annotations

import json

from psycopg import sql

from ..state import title_from

TITLE_MESSAGES = 5
"""Queued messages after a root's creation looked at for its title (a blank one gives none)."""


def live_roots_statement(schema: str) -> sql.Composed:
    """``(root, updated)`` of every live root whose id starts with ``%(prefix)s``."""
    s = sql.Identifier(schema)
    return sql.SQL(
        "SELECT l.root, last.ts FROM {s}.leases l"
        " CROSS JOIN LATERAL (SELECT e.ts FROM {s}.events e WHERE e.session_id = l.root"
        "  ORDER BY e.seq DESC LIMIT 1) last"
        " CROSS JOIN LATERAL (SELECT e.kind FROM {s}.events e WHERE e.session_id = l.root"
        "  AND e.kind IN ('session_created', 'archived', 'deleted')"
        "  ORDER BY e.seq DESC LIMIT 1) life"
        " WHERE NOT l.deleted AND life.kind = 'session_created'"
        " AND left(l.root, length(%(prefix)s)) = %(prefix)s"
    ).format(s=s)


def titles_statement(schema: str, messages: int = 1) -> sql.Composed:
    """``(root, creation body, [message bodies])`` of the roots in ``%(roots)s``: the first
    ``messages`` queued after the creation (one is nearly always enough, and each one more
    costs a scan of the session's records up to it: :func:`title_needs_more`)."""
    s = sql.Identifier(schema)
    return sql.SQL(
        "SELECT born.session_id, born.body, ARRAY(SELECT m.body FROM {s}.events m"
        "  WHERE m.session_id = born.session_id AND m.kind = 'message_queued'"
        "  AND m.seq > born.seq ORDER BY m.seq LIMIT {n})"
        " FROM unnest(%(roots)s::text[]) r(root)"
        " CROSS JOIN LATERAL (SELECT e.session_id, e.seq, e.body FROM {s}.events e"
        "  WHERE e.session_id = r.root AND e.kind = 'session_created'"
        "  ORDER BY e.seq DESC LIMIT 1) born"
    ).format(s=s, n=sql.Literal(messages))


def title_needs_more(created: bytes, messages: list[bytes], limit: int) -> bool:
    """The title may lie in a later message: none so far gave one, and there may be more."""
    if json.loads(created)["event"].get("title") is not None or len(messages) < limit:
        return False
    return all(title_from(str(json.loads(m)["event"].get("text", ""))) is None for m in messages)


def title_of(created: bytes, messages: list[bytes]) -> str | None:
    """The session's title as ``SessionState`` folds it, from its stored records' JSON."""
    event = json.loads(created)["event"]
    title = event.get("title")
    for body in messages if title is None else ():
        title = title_from(str(json.loads(body)["event"].get("text", "")))
        if title is not None:
            break
    return title or event.get("description") or None
