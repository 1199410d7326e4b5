"""Access tokens: accounts, access levels and bound workspaces, stored hashed on disk.

A token is ``hat_<id>_<secret>``. The file ``<state>/tokens.json`` (state directory
from ``--state``, else ``$HALO_ACTORS_HOME``, else ``~/.halo_actors``) keeps, per
token, its public ``id``, the **sha256 of the whole token string**, the account, the
access level, the bound workspace (an absolute realpath) and the creation time. The
secret itself is printed once, by ``token create``, and never stored.

Invariants:
- an account id is 1–64 characters of ``[A-Za-z0-9-]`` (no ``_``), so the session
  namespace ``web_<accountId>_`` of one account is never a prefix of another's;
- the file is replaced atomically (write a temporary file, ``fsync``, rename) with
  mode 0600, in a state directory kept 0700, so a reader sees the old or the new list, never a torn one; two CLI
  writers racing each other can lose one change (last rename wins);
- :class:`TokenCache` re-reads the file when it changes (its inode, size or mtime:
  every save is a new inode), checked at most once per ``reload_every`` seconds and,
  while the server runs, at least that often (:meth:`TokenCache.watch`), so a
  revocation takes effect within that time (plus one read of the file). It then
  reports the tokens that vanished or changed (``on_revoked``): the front ends their
  open streams. A damaged file (or an unreachable token database) is logged and the
  tokens read before stay in force.

Blocking file I/O; the server calls it through ``trio.to_thread.run_sync``.

With ``serve --store postgresql://…`` the tokens live in that database instead
(``pgtokens.PgTokenStore``), so every node serves the same list: the same
:class:`TokenBackend` interface, the same cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Protocol

import trio

from ...core.errors import InvalidInput
from ...core.logger import get_logger

Access = Literal["full", "workspace", "readonly"]
ACCESS_LEVELS: tuple[Access, ...] = ("full", "workspace", "readonly")
TOKEN_FILE = "tokens.json"
HOME_ENV = "HALO_ACTORS_HOME"
_ACCOUNT = re.compile(r"[A-Za-z0-9-]{1,64}")
TOKEN_ID = re.compile(r"[0-9a-f]{8}")
log = get_logger("halo_actors.http")


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """One stored token (everything but the secret)."""

    id: str
    sha256: str
    account_id: str
    access: Access
    workspace: str
    created_at: int
    """Epoch milliseconds."""

    def public(self) -> dict[str, object]:
        """What ``token list`` shows: never the hash."""
        return {
            "id": self.id,
            "accountId": self.account_id,
            "access": self.access,
            "workspace": self.workspace,
            "createdAt": self.created_at,
        }


def default_state_dir() -> Path:
    env = os.environ.get(HOME_ENV)
    return Path(env) if env else Path.home() / ".halo_actors"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_account_id(account_id: str) -> str:
    if _ACCOUNT.fullmatch(account_id) is None:
        raise InvalidInput("account id must be 1-64 characters of [A-Za-z0-9-]")
    return account_id


def check_access(access: str) -> Access:
    for level in ACCESS_LEVELS:
        if access == level:
            return level
    raise InvalidInput(f"access must be one of {', '.join(ACCESS_LEVELS)}")


class TokenBackend(Protocol):
    """Where tokens are kept: this file store (the default), or the database of a
    ``serve --store`` deployment (``pgtokens.PgTokenStore``). One interface, one test
    suite; every method blocks (the server runs them in worker threads)."""

    state_dir: Path
    """The node's state directory (never served, never shown to commands)."""

    @property
    def path(self) -> Path | str:
        """Where the tokens are, for messages."""
        ...

    def load(self) -> list[TokenInfo]: ...

    def create(self, account_id: str, access: str, workspace: str | os.PathLike[str]) -> str: ...

    def find(self, token: str) -> TokenInfo | None: ...

    def revoke(self, token_or_id: str) -> TokenInfo | None: ...

    def version(self) -> tuple[int, int, int]:
        """Changes with every change of the token list."""
        ...


class TokenStore:
    """The token file of one state directory."""

    def __init__(self, state_dir: str | os.PathLike[str] | None = None) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.path = self.state_dir / TOKEN_FILE

    def load(self) -> list[TokenInfo]:
        """Every stored token; an absent file means none, a damaged one is ``InvalidInput``."""
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return [
                TokenInfo(
                    id=str(row["id"]),
                    sha256=str(row["sha256"]),
                    account_id=str(row["account_id"]),
                    access=check_access(str(row["access"])),
                    workspace=str(row["workspace"]),
                    created_at=int(row["created_at"]),
                )
                for row in raw.get("tokens", [])
            ]
        except FileNotFoundError:
            return []
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidInput(f"the token file {self.path} is damaged: {exc!r}") from None

    def create(self, account_id: str, access: str, workspace: str | os.PathLike[str]) -> str:
        """Store a new token and return its secret string (shown once, never stored)."""
        root = os.path.realpath(os.fspath(workspace))
        if not os.path.isdir(root):
            raise InvalidInput(f"workspace {os.fspath(workspace)!r} is not a directory")
        token_id = secrets.token_hex(4)
        token = f"hat_{token_id}_{secrets.token_urlsafe(24)}"
        info = TokenInfo(
            id=token_id,
            sha256=hash_token(token),
            account_id=check_account_id(account_id),
            access=check_access(access),
            workspace=root,
            created_at=time.time_ns() // 1_000_000,
        )
        self._save([*self.load(), info])
        return token

    def find(self, token: str) -> TokenInfo | None:
        digest = hash_token(token)
        return next((t for t in self.load() if t.sha256 == digest), None)

    def revoke(self, token_or_id: str) -> TokenInfo | None:
        """Remove the token named by its id or its full string; the removed one, or None."""
        tokens = self.load()
        if TOKEN_ID.fullmatch(token_or_id):
            gone = next((t for t in tokens if t.id == token_or_id), None)
        else:
            digest = hash_token(token_or_id)
            gone = next((t for t in tokens if t.sha256 == digest), None)
        if gone is not None:
            self._save([t for t in tokens if t is not gone])
        return gone

    def version(self) -> tuple[int, int, int]:
        """Changes whenever the file is saved (a save renames a new inode into place)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return (0, 0, 0)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _save(self, tokens: list[TokenInfo]) -> None:
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        body = json.dumps({"version": 1, "tokens": [asdict(t) for t in tokens]}, indent=2)
        fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=self.state_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise


class TokenCache:
    """The server's view of a :class:`TokenBackend`: a hash → token map, reloaded on change."""

    def __init__(
        self,
        store: TokenBackend,
        *,
        reload_every: float = 0.5,
        on_revoked: Callable[[list[str]], None] = lambda hashes: None,
    ) -> None:
        self.store = store
        self._reload_every = reload_every
        self._on_revoked = on_revoked
        self._by_hash: dict[str, TokenInfo] = {}
        self._version: tuple[int, int, int] | None = None
        self._checked_at = -float("inf")
        self._lock = trio.Lock()

    async def lookup(self, token: str) -> TokenInfo | None:
        if trio.current_time() - self._checked_at >= self._reload_every:
            await self._refresh()
        return self._by_hash.get(hash_token(token))

    def workspaces(self) -> set[str]:
        """The workspaces of the tokens read so far (never blocks)."""
        return {t.workspace for t in self._by_hash.values()}

    async def _refresh(self, *, force: bool = False) -> None:
        """Re-read the file if it changed (checked at most once per ``reload_every`` unless
        ``force``); concurrent callers wait for the one reading it."""
        async with self._lock:
            if not force and trio.current_time() - self._checked_at < self._reload_every:
                return
            try:
                await self._reload_if_changed()
            finally:
                self._checked_at = trio.current_time()

    async def watch(self, until: trio.Event) -> None:
        """Re-check the file every ``reload_every`` seconds (at least every 0.1 s apart)
        until ``until`` is set, so a revocation ends open streams with no request. Each
        tick checks (``force``): a request's recent check must not push the next one back."""
        while True:
            with trio.move_on_after(max(self._reload_every, 0.1)):
                await until.wait()
                return
            await self._refresh(force=True)

    async def _reload_if_changed(self) -> None:
        try:
            version = await trio.to_thread.run_sync(self.store.version)
            if version == self._version:
                return
            tokens = await trio.to_thread.run_sync(self.store.load)
        except (InvalidInput, OSError) as exc:  # keep serving with the tokens we had
            log.error("token_file_unreadable", path=str(self.store.path), error=str(exc))
            return
        before, self._by_hash = self._by_hash, {t.sha256: t for t in tokens}
        self._version = version
        gone = [h for h, t in before.items() if self._by_hash.get(h) != t]
        if gone:
            self._on_revoked(gone)
