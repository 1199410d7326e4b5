"""Access tokens in PostgreSQL: one token list for every node of a ``serve --store``.

The same interface as the file store (:class:`~.tokens.TokenStore`; both are a
:class:`~.tokens.TokenBackend`), so ``token create|list|revoke --store`` and the
server's :class:`~.tokens.TokenCache` work on either. Rows live in
``<schema>.tokens`` (``schema``: the deployment's ``--store-schema``), one per token:
its id, the **sha256 of the whole token string**, account, access level, bound
workspace (the path every node names it by) and creation time. The secret is never
stored. ``<schema>.token_list`` holds one counter, bumped in the transaction of every
change, which is the store's :meth:`version`.

Invariants:
- every change (create, revoke) is one transaction that also bumps the counter, so a
  node that sees the counter unchanged has every token as it was, and one that sees it
  moved reloads the whole list (the server checks it every ``token_reload`` seconds,
  0.5 by default: a revocation on any node reaches every node within that plus one
  query);
- a token id is unique (primary key) and so is its hash; bad input (account, access,
  workspace) is refused before anything is written;
- blocking I/O on one connection of its own (reconnected after a failure), guarded by
  a lock; the server calls it through ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

from ...core.errors import InvalidInput
from ...core.log.pgschema import ensure_tables
from .tokens import TOKEN_ID, TokenInfo, check_access, check_account_id, hash_token

_DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.tokens (
    id         TEXT PRIMARY KEY,
    sha256     TEXT   NOT NULL UNIQUE,
    account_id TEXT   NOT NULL,
    access     TEXT   NOT NULL,
    workspace  TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.token_list (
    one     BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    version BIGINT NOT NULL
);
INSERT INTO {s}.token_list (one, version) VALUES (TRUE, 0) ON CONFLICT DO NOTHING
"""
_COLUMNS = "id, sha256, account_id, access, workspace, created_at"

Conn = psycopg.Connection[tuple[object, ...]]


class TokenStoreUnavailable(OSError):
    """The token database could not be reached or answered with an error. An ``OSError``,
    like a token file that cannot be read: the server keeps the tokens it read before
    and logs it; the CLI prints it."""


class PgTokenStore:
    """The token list of one deployment schema in a PostgreSQL database."""

    def __init__(
        self, dsn: str, schema: str = "halo", *, state_dir: str | os.PathLike[str] | None = None
    ) -> None:
        from .tokens import default_state_dir

        self.dsn = dsn
        self.schema = schema
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        """This node's state directory (kept from commands' sight, as with the file store)."""
        self.path = f"PostgreSQL table {schema}.tokens"
        """Where the tokens are, for messages."""
        self._conn: Conn | None = None
        self._lock = threading.Lock()
        s = sql.Identifier(schema)
        self._select = sql.SQL(
            f"SELECT {_COLUMNS} FROM {{}}.tokens ORDER BY created_at, id"
        ).format(s)
        self._insert = sql.SQL(
            f"INSERT INTO {{}}.tokens ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)"
        ).format(s)
        self._delete_by_id = sql.SQL(
            f"DELETE FROM {{}}.tokens WHERE id = %s RETURNING {_COLUMNS}"
        ).format(s)
        self._delete_by_hash = sql.SQL(
            f"DELETE FROM {{}}.tokens WHERE sha256 = %s RETURNING {_COLUMNS}"
        ).format(s)
        self._find = sql.SQL(f"SELECT {_COLUMNS} FROM {{}}.tokens WHERE sha256 = %s").format(s)
        self._bump = sql.SQL("UPDATE {}.token_list SET version = version + 1").format(s)
        self._version = sql.SQL("SELECT version FROM {}.token_list").format(s)
        self._ddl = [sql.SQL(part).format(s=s) for part in _DDL.strip().split(";\n")]

    # --- the connection ------------------------------------------------------------------

    @contextmanager
    def _session(self) -> Iterator[Conn]:
        """The connection, under the lock; a database error drops it (the next call
        reconnects) and is raised as ``TokenStoreUnavailable``."""
        with self._lock:
            try:
                yield self._connection()
            except psycopg.Error as exc:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise TokenStoreUnavailable(f"{self.path}: {first}") from None

    def _connection(self) -> Conn:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=10, application_name="halo-tokens"
            )
            relations = [sql.Identifier(self.schema, t) for t in ("tokens", "token_list")]
            ensure_tables(conn, f"halo-schema:{self.schema}", relations, self._ddl)
            self._conn = conn
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # --- the TokenBackend interface ------------------------------------------------------

    def load(self) -> list[TokenInfo]:
        with self._session() as conn:
            return [_info(row) for row in conn.execute(self._select)]

    def create(self, account_id: str, access: str, workspace: str | os.PathLike[str]) -> str:
        """Store a new token and return its secret string (shown once, never stored)."""
        root = os.path.realpath(os.fspath(workspace))
        if not os.path.isdir(root):
            raise InvalidInput(f"workspace {os.fspath(workspace)!r} is not a directory")
        account, level = check_account_id(account_id), check_access(access)
        token_id = secrets.token_hex(4)
        token = f"hat_{token_id}_{secrets.token_urlsafe(24)}"
        row = (token_id, hash_token(token), account, level, root, time.time_ns() // 1_000_000)
        with self._session() as conn, conn.transaction():
            conn.execute(self._insert, row)
            conn.execute(self._bump)
        return token

    def find(self, token: str) -> TokenInfo | None:
        with self._session() as conn:
            row = conn.execute(self._find, (hash_token(token),)).fetchone()
        return None if row is None else _info(row)

    def revoke(self, token_or_id: str) -> TokenInfo | None:
        """Remove the token named by its id or its full string; the removed one, or None."""
        if TOKEN_ID.fullmatch(token_or_id):
            statement, key = self._delete_by_id, token_or_id
        else:
            statement, key = self._delete_by_hash, hash_token(token_or_id)
        with self._session() as conn, conn.transaction():
            row = conn.execute(statement, (key,)).fetchone()
            if row is not None:
                conn.execute(self._bump)
        return None if row is None else _info(row)

    def version(self) -> tuple[int, int, int]:
        """Moves with every change (the ``token_list`` counter)."""
        with self._session() as conn:
            row = conn.execute(self._version).fetchone()
        return (int(row[0]) if row else 0, 0, 0)  # type: ignore[call-overload]


def _info(row: tuple[object, ...]) -> TokenInfo:
    token_id, digest, account, access, workspace, created = row
    return TokenInfo(
        id=str(token_id),
        sha256=str(digest),
        account_id=str(account),
        access=check_access(str(access)),
        workspace=str(workspace),
        created_at=int(created),  # type: ignore[call-overload]
    )
