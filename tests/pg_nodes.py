"""Real nodes for tests: ``python -m halo_actors serve --store postgresql://…`` subprocesses.

Every node of one :class:`Cluster` shares the test's PostgreSQL schema prefix, one
workspace directory and one token state directory (all on this machine, on loopback).
A test may SIGKILL, SIGSTOP and SIGCONT a node, and restart it under the same node id;
:meth:`Cluster.close` ends (and reaps) every node it started, whatever state it is in.
The log is read straight from the database (``records``) to check what was written
under which lease epoch. Command groups a test registers in ``groups`` are killed at
close if still alive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import psycopg
from proc_table import live_group_members
from psycopg import sql
from served import STOP_GRACE, free_port, spawn_serve

from halo_actors.fronts.http.pgtokens import PgTokenStore
from halo_actors.runtime.ownership import ClusterStore


class RawRecord(NamedTuple):
    seq: int
    root: str
    epoch: int
    body: bytes
    """The record's JSON, as ``encode_record`` wrote it."""


@dataclass
class StoredRecord:
    seq: int
    session_id: str
    epoch: int
    kind: str
    event: dict[str, object]


@dataclass
class Node:
    cluster: Cluster
    node_id: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[str] | None = None
    stopped: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.process is None, "already running"
        c = self.cluster
        args = ["--port", str(self.port), "--state", str(c.state)]
        args += ["--workspace", str(c.workspace), "--store", c.dsn, "--store-schema", c.schema]
        args += ["--node-id", self.node_id, "--lease-ttl", str(c.ttl), "--keepalive", "5"]
        self.process = spawn_serve(args, c.tmp / f"{self.node_id}.log", f"node {self.node_id}")

    def signal(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)
        self.stopped = signum == signal.SIGSTOP

    def kill(self) -> None:
        """SIGKILL the node's process alone (its commands' groups are left running)."""
        process, self.process = self.process, None
        if process is None:
            return
        process.kill()
        process.wait()
        self._close(process)

    def stop(self) -> None:
        """SIGTERM (a clean shutdown: its leases given up), SIGKILL after a grace."""
        process, self.process = self.process, None
        if process is None:
            return
        if self.stopped:
            process.send_signal(signal.SIGCONT)
            self.stopped = False
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self._close(process)

    @staticmethod
    def _close(process: subprocess.Popen[str]) -> None:
        if process.stdout is not None:
            process.stdout.close()


@dataclass
class Cluster:
    tmp: Path
    dsn: str
    schema: str
    ttl: float = 2.0
    nodes: list[Node] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    """Command process groups a test saw start: killed at close if any is still alive."""

    @property
    def workspace(self) -> Path:
        return self.tmp / "ws"

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    def node(self, node_id: str) -> Node:
        node = Node(self, node_id)
        self.nodes.append(node)
        return node

    def token(self, access: str = "full", account: str = "alice") -> str:
        """A token in the deployment's token table (what ``token create --store`` makes)."""
        self.workspace.mkdir(parents=True, exist_ok=True)
        store = PgTokenStore(self.dsn, self.schema, state_dir=self.state)
        try:
            return store.create(account, access, self.workspace)
        finally:
            store.close()

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        for pgid in self.groups:  # whatever the test proved, no command outlives it
            if live_group_members(pgid):
                os.killpg(pgid, signal.SIGKILL)

    @property
    def log_schema(self) -> str:
        store = ClusterStore(self.dsn, self.schema)
        return store.workspace_schema(os.path.realpath(self.workspace))

    def records(self, root: str | None = None) -> list[StoredRecord]:
        """The workspace log's records (of tree ``root``, or all), read from the database."""
        where = sql.SQL("WHERE root = %s") if root is not None else sql.SQL("")
        query = sql.SQL("SELECT seq, session_id, epoch, kind, body FROM {} {} ORDER BY seq").format(
            sql.Identifier(self.log_schema, "events"), where
        )
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            rows = conn.execute(query, (root,) if root is not None else ()).fetchall()
        return [
            StoredRecord(int(s), str(sid), int(e), str(k), json.loads(bytes(b))["event"])
            for s, sid, e, k, b in rows
        ]

    def raw_records(self) -> list[RawRecord]:
        """Every record of the workspace's log with its tree and epoch, in seq order."""
        query = sql.SQL("SELECT seq, root, epoch, body FROM {} ORDER BY seq").format(
            sql.Identifier(self.log_schema, "events")
        )
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            rows = conn.execute(query).fetchall()
        return [RawRecord(int(s), str(r), int(e), bytes(b)) for s, r, e, b in rows]

    def lease(self, root: str) -> tuple[str, int] | None:
        """(node, epoch) of ``root``'s lease row, or None."""
        query = sql.SQL("SELECT node, epoch FROM {} WHERE root = %s").format(
            sql.Identifier(self.log_schema, "leases")
        )
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(query, (root,)).fetchone()
        return None if row is None else (str(row[0]), int(row[1]))
