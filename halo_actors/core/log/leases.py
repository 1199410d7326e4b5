"""Tree leases: one node owns a tree at a time, under an epoch, renewed by heartbeat.

The ``leases`` table (``pgschema.py``) holds ``(root, node, epoch, expires_at)``.
:class:`TreeLeases` is one node's side of it: it takes leases, renews the ones it
holds every ``ttl / 3``, gives them up, and ties each held tree's appends to its
epoch in the :class:`~.postgres.PostgresEventLog` (``log.hold``), whose commit refuses
an append whose epoch is no longer current. See ``docs/design/postgres.md``.

Invariants:
- every time is the database's clock (``clock_timestamp()``): nodes' clocks never
  have to agree;
- an epoch only ever grows for a root: a lease is taken over by bumping it and
  given up by expiring it, never by deleting its row (a new row would restart at 1
  and a stale node holding epoch 1 could write again);
- a lease is taken only when it is free (no row, expired, or given up); a takeover
  waits for a commit in flight under the old epoch (that commit holds the row's
  share lock), so the old owner's records all precede the new owner's;
- a deleted tree's lease is buried (``deleted``): never taken over, never claimed
  again except by a node creating the tree anew;
- a lease this node could not renew is dropped here at once (``on_lost``), and also
  when no renewal at all succeeded for a whole ``ttl`` (the database unreachable):
  a node never goes on believing it owns a tree past its lease.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import NamedTuple

import psycopg
import trio
from psycopg import sql

from ..ids import check_session_id, is_root
from ..logger import get_logger
from .postgres import PostgresEventLog

DEFAULT_TTL = 10.0
"""Seconds a lease lasts without renewal; takeover after a crash takes about this long."""

log = get_logger("halo_actors.leases")


class Taken(NamedTuple):
    epoch: int
    before: str | None
    """The node that held the lease before (None: the tree had none)."""


Conn = psycopg.Connection[tuple[object, ...]]


class _Statements:
    def __init__(self, schema: str) -> None:
        t = sql.Identifier(schema, "leases")
        ttl = sql.SQL("clock_timestamp() + make_interval(secs => %(ttl)s)")
        self.acquire = sql.SQL(
            "WITH before AS (SELECT node FROM {t} WHERE root = %(root)s)"
            " INSERT INTO {t} AS l (root, node, epoch, expires_at)"
            " VALUES (%(root)s, %(node)s, 1, {ttl})"
            " ON CONFLICT (root) DO UPDATE SET node = excluded.node, epoch = l.epoch + 1,"
            " expires_at = excluded.expires_at, deleted = FALSE"
            " WHERE l.expires_at < clock_timestamp() AND (%(create)s OR NOT l.deleted)"
            " RETURNING epoch, (SELECT node FROM before)"
        ).format(t=t, ttl=ttl)
        self.give_up_node = sql.SQL(
            "UPDATE {t} SET expires_at = '-infinity' WHERE node = %(node)s"
            " AND expires_at > '-infinity' RETURNING root"
        ).format(t=t)
        self.renew = sql.SQL(
            "UPDATE {t} SET expires_at = {ttl}"
            " WHERE node = %(node)s AND root = ANY(%(roots)s) AND expires_at >= clock_timestamp()"
            " RETURNING root, epoch"
        ).format(t=t, ttl=ttl)
        self.give_up = sql.SQL(
            "UPDATE {t} SET expires_at = '-infinity'"
            " WHERE node = %(node)s AND root = %(root)s AND epoch = %(epoch)s"
        ).format(t=t)
        self.bury = sql.SQL(
            "UPDATE {t} SET expires_at = '-infinity', deleted = TRUE"
            " WHERE node = %(node)s AND root = %(root)s AND epoch = %(epoch)s"
        ).format(t=t)
        self.expired = sql.SQL(
            "SELECT root FROM {t} WHERE expires_at < clock_timestamp() AND NOT deleted"
            " ORDER BY root LIMIT %(limit)s"
        ).format(t=t)
        self.owner = sql.SQL(
            "SELECT node, epoch, expires_at >= clock_timestamp() FROM {t}"
            " WHERE root = %(root)s AND NOT deleted"
        ).format(t=t)


class TreeLeases:
    """One node's leases on one shared log. Run :meth:`open` (a context manager)."""

    def __init__(
        self,
        event_log: PostgresEventLog,
        *,
        ttl: float = DEFAULT_TTL,
        on_lost: Callable[[str], None] = lambda root: None,
    ) -> None:
        self.log = event_log
        self.node_id = event_log.node_id
        self.ttl = ttl
        self.on_lost = on_lost
        """Called on the trio thread with each root this node lost (after ``log.release``)."""
        self.held: dict[str, int] = {}
        """root -> epoch, for every tree this node owns now."""
        self._sql = _Statements(event_log.schema)
        self._conn: Conn | None = None
        self._limiter = trio.CapacityLimiter(1)
        self._last_renewed = time.monotonic()

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        event_log: PostgresEventLog,
        *,
        ttl: float = DEFAULT_TTL,
        on_lost: Callable[[str], None] = lambda root: None,
    ) -> AsyncIterator[TreeLeases]:
        """Connect and heartbeat until the block exits; then give every lease up."""
        leases = cls(event_log, ttl=ttl, on_lost=on_lost)
        event_log.fence()
        leases._conn = conn = await trio.to_thread.run_sync(
            lambda: psycopg.connect(
                event_log.dsn,
                autocommit=True,
                application_name=f"halo-{leases.node_id}-leases"[:63],
                connect_timeout=10,
            )
        )
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(leases._heartbeat)
                try:
                    yield leases
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await leases._give_up_all()
            await trio.to_thread.run_sync(conn.close)

    async def _run(
        self, statement: sql.Composed, params: dict[str, object]
    ) -> list[tuple[object, ...]]:
        conn = self._conn
        assert conn is not None, "opened by TreeLeases.open"

        def run() -> list[tuple[object, ...]]:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description is not None else []

        return await trio.to_thread.run_sync(run, limiter=self._limiter)

    async def acquire(self, root: str) -> bool:
        """Own ``root`` if its lease is free (or already ours); True when this node owns it."""
        if root in self.held:
            return True
        return await self.take(root) is not None

    async def take(self, root: str, *, create: bool = False) -> Taken | None:
        """Take ``root``'s lease if it is free: the new epoch and the node that held it
        before (None for a new tree); None when it is held (here or elsewhere), or when
        the tree was deleted (``bury``) and ``create`` is false."""
        check_session_id(root)
        if not is_root(root):
            raise ValueError(f"leases are per tree: {root!r} is not a root")
        if root in self.held:
            return None
        rows = await self._run(
            self._sql.acquire,
            {"root": root, "node": self.node_id, "ttl": self.ttl, "create": create},
        )
        if not rows:
            return None
        epoch = int(rows[0][0])  # type: ignore[call-overload]
        before = None if rows[0][1] is None else str(rows[0][1])
        self.held[root] = epoch
        self.log.hold(root, epoch)
        log.info("lease_acquired", root=root, epoch=epoch, node=self.node_id, before=before)
        return Taken(epoch, before)

    async def give_up_stale(self) -> list[str]:
        """Expire every lease the table says this node holds that this process did not take:
        a node id names one process, so these were left by its previous life (a crash).
        Call at start, before taking any; the trees are free to take again at once."""
        rows = await self._run(self._sql.give_up_node, {"node": self.node_id})
        return [str(root) for (root,) in rows]

    def forget(self, root: str, epoch: int) -> None:
        """A commit under ``epoch`` was refused (fenced): if that is still the epoch held
        here, the lease is lost (``on_lost``)."""
        if self.held.get(root) == epoch:
            self._lose(root)

    async def owner(self, root: str) -> tuple[str, int, bool] | None:
        """``(node, epoch, live)`` of ``root``'s lease, or None if it never had one (or the
        tree was deleted: ``bury``)."""
        rows = await self._run(self._sql.owner, {"root": root})
        if not rows:
            return None
        node, epoch, live = rows[0]
        return str(node), int(epoch), bool(live)  # type: ignore[call-overload]

    async def expired(self, limit: int = 100) -> list[str]:
        """Roots whose lease has run out (their owner died, stalled or gave them up)."""
        return [str(r) for (r,) in await self._run(self._sql.expired, {"limit": limit})]

    async def release(self, root: str) -> None:
        """Give ``root`` up now (another node may take it at once)."""
        epoch = self.held.pop(root, None)
        self.log.release(root)
        if epoch is not None:
            await self._run(self._sql.give_up, {"root": root, "node": self.node_id, "epoch": epoch})

    async def bury(self, root: str) -> None:
        """The tree ``root`` was deleted here: give its lease up for good. No node takes it
        over (``expired`` skips it) or claims it again, except to create it anew
        (``take(create=True)``)."""
        epoch = self.held.pop(root, None)
        self.log.release(root)
        if epoch is not None:
            await self._run(self._sql.bury, {"root": root, "node": self.node_id, "epoch": epoch})
            log.info("lease_buried", root=root, epoch=epoch, node=self.node_id)

    def _lose(self, root: str) -> None:
        self.held.pop(root, None)
        self.log.release(root)
        log.warning("lease_lost", root=root, node=self.node_id)
        self.on_lost(root)

    async def renew(self) -> None:
        """Extend every held lease; drop (``on_lost``) the ones that are no longer ours."""
        if not self.held:
            self._last_renewed = time.monotonic()
            return
        asked = dict(self.held)
        rows = await self._run(
            self._sql.renew, {"roots": list(asked), "node": self.node_id, "ttl": self.ttl}
        )
        self._last_renewed = time.monotonic()
        kept = {str(root): int(epoch) for root, epoch in rows}  # type: ignore[call-overload]
        for root, epoch in asked.items():
            if kept.get(root) != epoch and self.held.get(root) == epoch:
                self._lose(root)

    async def _heartbeat(self) -> None:
        while True:
            await trio.sleep(self.ttl / 3)
            try:
                await self.renew()
            except psycopg.Error as exc:
                log.warning("lease_renewal_failed", node=self.node_id, error=repr(exc))
                if time.monotonic() - self._last_renewed >= self.ttl:
                    for root in list(self.held):
                        self._lose(root)

    async def _give_up_all(self) -> None:
        for root in list(self.held):
            with contextlib.suppress(psycopg.Error):
                await self.release(root)
