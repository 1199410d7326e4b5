"""One node of several sharing a PostgreSQL log: which trees it owns, and taking them.

:func:`open_node` runs, beside a supervisor opened without recovery, this node's
:class:`~halo_actors.core.log.leases.TreeLeases` and a :class:`NodeOwnership` that the
supervisor asks before touching a tree (``Supervisor.claim``). A tree is loaded from
the log (``Supervisor.recover_tree``) when this node takes its lease: because it
creates the tree, because it is the first to address it, or because its lease expired
(its owner died or stalled) and the takeover scan found it. A tree whose lease this
node loses (not renewed in time, or a commit fenced) is dropped without writing
(``Supervisor.drop_tree``). A message for a tree another node owns goes to it through
the database (``forwarding.py``). See ``docs/design/postgres.md`` (Nodes).

Invariants:
- a tree is loaded here only while this node holds its lease, and loaded at most once
  per lease: taking, dropping and recovering one root are serialised by its lock, and a
  tree lost and taken back is dropped before it is recovered again;
- a node id names one process: at start the node gives up the leases its previous life
  left, so its own trees come back at once (not after the lease ran out);
- command groups that a cut turn of another node left running are not killed here (on
  another host they are not ours to see): they are recorded for that node, which kills
  them when it comes back (:meth:`NodeOwnership.kill_own_orphans`);
- a failed log (fail-stop: its writer's connection broke mid-commit) ends the node the
  way it ends a lone supervisor: every task is cancelled and :func:`open_node_supervisor`
  raises the log's bare ``StoreFailed``, which a host (the HTTP front) takes as "reopen
  on the next request"; a background task of the node that meets the failure first
  waits for that cancel instead of crashing the node, and a lease the heartbeat loses
  while the node ends is only forgotten (nothing is started in a closed nursery).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Literal

import psycopg
import trio
from psycopg import sql

from ..core.errors import StoreFailed
from ..core.events import CommandStarted
from ..core.log.inbox import Inbox
from ..core.log.leases import TreeLeases
from ..core.log.pglisting import (
    TITLE_MESSAGES,
    live_roots_statement,
    title_needs_more,
    title_of,
    titles_statement,
)
from ..core.log.pgschema import ensure_tables
from ..core.log.postgres import PostgresEventLog
from ..core.logger import get_logger
from .forwarding import Forwarding
from .orphans import kill_orphans
from .ownership import OwnedElsewhere
from .supervisor import Supervisor, open_supervisor

log = get_logger("halo_actors.cluster")

Conn = psycopg.Connection[tuple[object, ...]]

SCAN_EVERY = 1.0
"""Seconds between two looks for trees whose lease expired (their owner died or stalled)."""
ORPHAN_GRACE = 2.0
"""Seconds a group left by this node's previous life gets between SIGTERM and SIGKILL."""


class _Listing:
    def __init__(self, schema: str) -> None:
        self.live_roots = live_roots_statement(schema)
        self.titles = titles_statement(schema)
        self.more = titles_statement(schema, TITLE_MESSAGES)


class NodeOwnership:
    """This node's trees in one workspace's shared log (the supervisor's ``owner``)."""

    def __init__(self, sup: Supervisor, leases: TreeLeases) -> None:
        self.sup = sup
        self.leases = leases
        self.node_id = leases.node_id
        self.loaded: set[str] = set()
        """Roots held and recovered here (a subset of ``leases.held``)."""
        self._stale: set[str] = set()
        """Roots lost and still loaded: dropped before anything else happens to them."""
        self._locks: dict[str, trio.Lock] = {}
        self.forwarding: Forwarding | None = None
        """Messages to and from other nodes (set by ``open_node_supervisor``)."""
        self.nursery: trio.Nursery | None = None
        """Where drops of lost trees run (set by ``open_node_supervisor``)."""
        self._orphans = sql.Identifier(leases.log.schema, "node_orphans")
        self._listing = _Listing(leases.log.schema)

    def _lock(self, root: str) -> trio.Lock:
        lock = self._locks.get(root)
        if lock is None:
            lock = self._locks[root] = trio.Lock()
        return lock

    # --- the supervisor's side -------------------------------------------------

    async def claim(self, root: str, *, create: bool) -> None:
        if root in self.loaded:
            return
        async with self._lock(root):
            if root in self.loaded:
                return
            owner = await self.leases.owner(root)
            if owner is None and not create:
                return  # no lease was ever taken (no record anywhere), or the tree was deleted
            if owner is not None and owner[2] and owner[0] != self.node_id:
                raise OwnedElsewhere(root, owner[0])
            if not await self._take(root, create=create):
                owner = await self.leases.owner(root)
                if owner is None and not create:
                    return  # a deleted tree (buried just now): nothing to load
                raise OwnedElsewhere(root, owner[0] if owner else "unknown")

    async def _take(self, root: str, *, create: bool = False) -> bool:
        """Caller holds the root's lock: take the lease if free and load the tree. A tree
        found deleted (its owner died before burying its lease) is buried, not kept,
        unless the caller is creating it anew."""
        if root in self._stale:
            await self._drop_now(root)
        taken = await self.leases.take(root, create=create)
        if taken is None:
            return False
        try:
            mine = taken.before in (None, self.node_id)
            started = await self.sup.recover_tree(
                root,
                orphans=None if mine else partial(self.record_orphans, taken.before or "", root),
            )
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.leases.release(root)
                await self.sup.drop_tree(root)
            raise
        if not create and self.sup.was_deleted(root):
            await self.leases.bury(root)
            log.info("deleted_tree_buried", root=root, epoch=taken.epoch, before=taken.before)
            return False
        self.loaded.add(root)
        log.info("tree_taken", root=root, epoch=taken.epoch, before=taken.before, runs=started)
        return True

    async def forward(
        self,
        session_id: str,
        text: str,
        *,
        images: tuple[str, ...],
        source: str | None,
        mode: Literal["soft", "hard"],
    ) -> tuple[Literal["started", "queued"], int]:
        assert self.forwarding is not None, "set by open_node_supervisor"
        return await self.forwarding.forward(
            session_id, text, images=images, source=source, mode=mode
        )

    async def deleted(self, root: str) -> None:
        async with self._lock(root):
            self.loaded.discard(root)
            await self.leases.bury(root)
            if self.forwarding is not None:
                self.forwarding.logged.pop(root, None)

    # --- listing every tree -------------------------------------------------------

    async def roots(self, prefix: str) -> list[tuple[str, int]] | None:
        rows = await self.leases.log.query(self._listing.live_roots, {"prefix": prefix})
        return [(str(root), int(ts)) for root, ts in rows]  # type: ignore[call-overload]

    async def titles(self, roots: list[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for statement, limit in ((self._listing.titles, 1), (self._listing.more, TITLE_MESSAGES)):
            rows = await self.leases.log.query(statement, {"roots": roots}) if roots else []
            roots = []
            for root, created, messages in rows:
                assert isinstance(created, bytes) and isinstance(messages, list)
                bodies = [bytes(m) for m in messages]
                if limit == 1 and title_needs_more(created, bodies, limit):
                    roots.append(str(root))  # its first message was blank: look further
                else:
                    out[str(root)] = title_of(created, bodies)
        return out

    # --- losing a tree -----------------------------------------------------------

    def lost(self, root: str) -> None:
        """``TreeLeases.on_lost``: stop serving the tree now; drop it in the background."""
        self.loaded.discard(root)
        self._stale.add(root)
        if self.nursery is not None:
            self.nursery.start_soon(self._drop, root)

    async def _drop(self, root: str) -> None:
        async with self._lock(root):
            if root in self._stale:
                await self._drop_now(root)

    async def _drop_now(self, root: str) -> None:
        await self.sup.drop_tree(root)
        self._stale.discard(root)
        if self.forwarding is not None:
            self.forwarding.logged.pop(root, None)
        log.warning("tree_dropped", root=root, node=self.node_id)

    # --- takeover ------------------------------------------------------------------

    async def scan(self) -> int:
        """Take every tree whose lease has run out; how many were taken."""
        taken = 0
        for root in await self.leases.expired(limit=100):
            if root in self.loaded:
                continue
            async with self._lock(root):
                if root not in self.loaded and await self._take(root):
                    taken += 1
        return taken

    async def scan_forever(self) -> None:
        while True:
            await trio.sleep(SCAN_EVERY)
            try:
                await self.scan()
            except (psycopg.Error, OSError) as exc:
                log.warning("takeover_scan_failed", node=self.node_id, error=repr(exc))

    # --- command groups left by a dead node ------------------------------------------

    async def record_orphans(self, node: str, root: str, commands: list[CommandStarted]) -> None:
        if not commands:
            return
        rows = [(node, root, c.pgid, c.started, c.boot_id) for c in commands]
        statement = sql.SQL(
            "INSERT INTO {} (node, root, pgid, started, boot_id) VALUES (%s, %s, %s, %s, %s)"
        ).format(self._orphans)

        def insert(conn: Conn) -> list[tuple[object, ...]]:
            conn.cursor().executemany(statement, rows)
            return []

        await self._db(insert)
        log.info("orphans_left_for_node", node=node, root=root, pgids=[c.pgid for c in commands])

    async def kill_own_orphans(self) -> list[int]:
        """Kill the groups other nodes found left by this node's previous life (when they
        took its trees over), if they are still alive and provably ours; forget them."""
        statement = sql.SQL(
            "DELETE FROM {} WHERE node = %s RETURNING pgid, started, boot_id"
        ).format(self._orphans)

        rows = await self._db(lambda conn: conn.execute(statement, (self.node_id,)).fetchall())
        commands = [
            CommandStarted(pgid=int(p), started=int(s), boot_id=str(b))  # type: ignore[call-overload]
            for p, s, b in rows
        ]
        return await kill_orphans(commands, ORPHAN_GRACE)

    async def _db(
        self, job: Callable[[Conn], list[tuple[object, ...]]]
    ) -> list[tuple[object, ...]]:
        """Run ``job`` on a connection of its own (rare: a start, a takeover with orphans)."""
        dsn = self.leases.log.dsn

        def run() -> list[tuple[object, ...]]:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
                return job(conn)

        return await trio.to_thread.run_sync(run)

    async def prepare(self) -> None:
        statement = sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (node TEXT NOT NULL, root TEXT NOT NULL,"
            " pgid BIGINT NOT NULL, started BIGINT NOT NULL, boot_id TEXT NOT NULL)"
        ).format(self._orphans)

        lock_key = f"halo-schema:{self.leases.log.schema}"

        def create(conn: Conn) -> list[tuple[object, ...]]:
            ensure_tables(conn, lock_key, [self._orphans], [statement])
            return []

        await self._db(create)


@asynccontextmanager
async def open_node_supervisor(
    event_log: PostgresEventLog, ttl: float, **supervisor: Any
) -> AsyncIterator[Supervisor]:
    """A supervisor (``open_supervisor``'s keyword arguments) that owns trees of the shared
    ``event_log`` under leases. On exit its runs close first (their records still under
    the leases), then every lease is given up for other nodes to take at once."""
    try:
        async with _node(event_log, ttl, supervisor) as sup:
            yield sup
    except BaseExceptionGroup as group:
        failure = event_log.failure
        _, other = group.split(StoreFailed)
        if failure is None or other is not None:
            raise
        raise failure from None  # the nurseries wrapped it; a host catches it bare


@asynccontextmanager
async def _node(
    event_log: PostgresEventLog, ttl: float, supervisor: dict[str, Any]
) -> AsyncIterator[Supervisor]:
    ownership: NodeOwnership | None = None

    def lost(root: str) -> None:
        if ownership is not None:
            ownership.lost(root)

    async with TreeLeases.open(event_log, ttl=ttl, on_lost=lost) as leases:
        event_log.on_fenced = leases.forget
        async with open_supervisor(event_log, recover=False, **supervisor) as sup:
            ownership = NodeOwnership(sup, leases)
            await ownership.prepare()
            given_up = await leases.give_up_stale()
            if given_up:
                log.info(
                    "leases_of_previous_life_given_up", node=leases.node_id, roots=len(given_up)
                )
            await ownership.kill_own_orphans()
            sup.owner = ownership
            try:
                async with Inbox.open(event_log) as inbox, trio.open_nursery() as nursery:
                    forwarding = ownership.forwarding = Forwarding(ownership, inbox)
                    ownership.nursery = nursery
                    await ownership.scan()
                    nursery.start_soon(_until_the_log_fails, event_log, ownership.scan_forever)
                    nursery.start_soon(_until_the_log_fails, event_log, forwarding.deliver_forever)
                    try:
                        yield sup
                    finally:
                        nursery.cancel_scope.cancel()
            finally:
                # closed: a lease the heartbeat loses while the node ends is only forgotten
                ownership.nursery = None


async def _until_the_log_fails(
    event_log: PostgresEventLog, task: Callable[[], Awaitable[None]]
) -> None:
    """Run a background task of the node; if it meets the log's failure, wait for the
    supervisor's fail-stop to cancel the node rather than crash it from here."""
    try:
        await task()
    except StoreFailed:
        if event_log.failure is None:
            raise
        await trio.sleep_forever()
