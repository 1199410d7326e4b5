"""Finding the test PostgreSQL server, and giving each test run its own schemas.

The DSN comes from ``HALO_PG_DSN`` (default: the local server on 127.0.0.1:5432, trust
auth, database ``test``). When no server answers (or psycopg is not installed):
- in CI (``CI=true``) or under ``make test-pg`` (``HALO_PG_REQUIRED=1``) the tests fail;
- elsewhere they skip, and the run prints one line saying why.

Every schema a run creates is named ``halo_t<run>_<n>`` (or starts so: a node's
workspace schemas) and dropped (``CASCADE``) when the run ends, whatever happened in
between.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field

import pytest

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def dsn() -> str:
    return os.environ.get("HALO_PG_DSN", DEFAULT_DSN)


def required() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("HALO_PG_REQUIRED") == "1"


def probe() -> str | None:
    """None when the server answers; otherwise why not, in one line."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[pg]')"
    try:
        with psycopg.connect(dsn(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"no PostgreSQL at {dsn()}: {first}"
    return None


@dataclass
class SchemaFactory:
    """Hands out fresh schema names for this run and drops them all at the end."""

    run: str = field(default_factory=lambda: f"halo_t{secrets.token_hex(4)}")
    made: list[str] = field(default_factory=list)

    def new(self) -> str:
        name = f"{self.run}_{len(self.made)}"
        self.made.append(name)
        return name

    def drop_all(self) -> None:
        if not self.made:
            return
        import psycopg
        from psycopg import sql

        with psycopg.connect(dsn(), autocommit=True, connect_timeout=10) as conn:
            # A name, and the schemas named after it (a node's workspaces: <name>_w<hash>).
            found = conn.execute(
                "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
                (f"{self.run}_",),
            ).fetchall()
            for name in sorted({*self.made, *(str(n) for (n,) in found)}):
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )
        self.made.clear()


_skip_reason: list[str] = []


def require_server() -> None:
    """Skip (or, where a server is required, fail) when PostgreSQL is not reachable."""
    if _skip_reason and _skip_reason[0] == "":
        return
    if not _skip_reason:
        _skip_reason.append(probe() or "")
    reason = _skip_reason[0]
    if not reason:
        return
    if required():
        pytest.fail(f"PostgreSQL is required here (CI or make test-pg): {reason}", pytrace=False)
    pytest.skip(reason)


def skip_line() -> str | None:
    """The one line to print when PostgreSQL tests were skipped in this run."""
    if _skip_reason and _skip_reason[0]:
        return f"PostgreSQL tests skipped: {_skip_reason[0]} (set HALO_PG_DSN, or run make test-pg)"
    return None
