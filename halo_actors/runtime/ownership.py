"""Which trees a runtime may write: the seam between the supervisor and tree leases.

A runtime alone on its log (SQLite, memory) owns every tree: :data:`LOCAL` says yes
to every claim. Nodes sharing one PostgreSQL log each own some trees, under fenced
leases (``cluster.py``): a claim takes a free lease and loads the tree from the log,
or raises :class:`OwnedElsewhere`. See ``docs/design/postgres.md`` (Nodes).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ..core.errors import InvalidInput, SessionUnavailable


class OwnedElsewhere(SessionUnavailable):
    """The session's tree is owned by another node (its lease is live there)."""

    def __init__(self, root: str, node: str) -> None:
        super().__init__(f"tree {root} is owned by node {node}")
        self.root = root
        self.node = node


class Ownership(Protocol):
    async def claim(self, root: str, *, create: bool) -> None:
        """Return once this runtime holds tree ``root`` and has it loaded; raise
        ``OwnedElsewhere`` if another node holds it. ``create=False``: a tree that never
        existed is not claimed (nothing to load; the caller finds no session)."""
        ...

    async def forward(
        self,
        session_id: str,
        text: str,
        *,
        images: tuple[str, ...],
        source: str | None,
        mode: Literal["soft", "hard"],
    ) -> tuple[Literal["started", "queued"], int]:
        """Hand a message for a tree another node owns to that node; return once it is
        durable in the shared log, with what it did there (started a run, or queued)
        and the seq of its record."""
        ...

    async def deleted(self, root: str) -> None:
        """Tree ``root`` was deleted here (its records durable): no runtime takes it over
        or loads it again, unless it is created anew."""
        ...

    async def roots(self, prefix: str) -> list[tuple[str, int]] | None:
        """Every live (not archived or deleted) root whose id starts with ``prefix``, on any
        node, as ``(id, updated_ts)``; None when this runtime's own registry knows every
        tree (then ``Supervisor.roots`` is the list)."""
        ...

    async def titles(self, roots: list[str]) -> dict[str, str | None]:
        """The titles of ``roots`` (listed by :meth:`roots`), as their states give them."""
        ...


class _Local:
    """One runtime alone on its log: every tree is its own."""

    async def claim(self, root: str, *, create: bool) -> None:
        return None

    async def forward(
        self,
        session_id: str,
        text: str,
        *,
        images: tuple[str, ...],
        source: str | None,
        mode: Literal["soft", "hard"],
    ) -> tuple[Literal["started", "queued"], int]:
        raise SessionUnavailable("no other node: every tree is this runtime's own")

    async def deleted(self, root: str) -> None:
        return None

    async def roots(self, prefix: str) -> list[tuple[str, int]] | None:
        return None

    async def titles(self, roots: list[str]) -> dict[str, str | None]:
        return {}


LOCAL: Ownership = _Local()


def default_node_id(port: int) -> str:
    """``<host>-<port>``: stable across restarts of one server, so a restarted node takes
    its own trees back at once; with no fixed port, a random suffix."""
    host = socket.gethostname().split(".")[0][:40] or "node"
    suffix = str(port) if port else secrets.token_hex(4)
    return "".join(c if c.isalnum() or c in "_.-" else "-" for c in f"{host}-{suffix}")


@dataclass(frozen=True)
class ClusterStore:
    """Where nodes share their logs: one PostgreSQL database, one schema prefix."""

    dsn: str
    schema: str = "halo"
    """The deployment's schema; each workspace's log lives in ``<schema>_w<hash>``."""
    node_id: str = field(default_factory=lambda: default_node_id(0))
    lease_ttl: float = 10.0

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,29}", self.schema):
            raise InvalidInput(
                f"schema {self.schema[:40]!r} must be 1-30 of [a-z0-9_], starting with a letter"
            )
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", self.node_id):
            raise InvalidInput(f"node id {self.node_id[:80]!r} must be 1-64 of [A-Za-z0-9_.-]")
        if not 1.0 <= self.lease_ttl <= 3600:
            raise InvalidInput(f"lease ttl {self.lease_ttl} must be 1 to 3600 seconds")

    def workspace_schema(self, workspace: str | os.PathLike[str]) -> str:
        """The schema of one workspace's log: every node names a workspace by the same path."""
        digest = hashlib.sha256(os.fspath(workspace).encode()).hexdigest()[:16]
        return f"{self.schema}_w{digest}"
