"""Who is calling, and which workspace and session a request addresses.

Rules (``docs/http.md``, "Addressing a session"):

- the token comes from the ``x-token`` header or the ``token`` query parameter; a
  missing, malformed (a character no token has: a newline, a space) or unknown one is
  401, and the message says which;
- overrides come from the JSON body, the query string or a header, highest first:
  ``workspace`` / ``x-workspace``, ``sessionId`` / ``x-session-id``;
- only a ``full`` token may name another workspace (naming its own bound one is
  allowed for every level); it must be an absolute path to a directory;
- a ``sessionId`` must be a safe id (400); a non-full token may address only ids
  whose root is in its namespace ``web_<accountId>_`` (else 403, ``NOT_OWNED``);
- without a ``sessionId``, the account's active session: the one set by
  ``/session new`` or ``/session switch``, else its most recently updated live
  root, else a fresh id (created by the first chat). The pointers live in memory:
  after a restart the "most recently updated" rule picks up again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ...core import ids
from ...runtime.supervisor import Supervisor
from .errors import (
    BAD_TOKEN,
    MALFORMED_TOKEN,
    MISSING_TOKEN,
    NOT_OWNED,
    READ_ONLY,
    WORKSPACE_NOT_ALLOWED,
    ApiError,
)
from .tokens import TokenCache, TokenInfo

WEB_NAMESPACE = "web"
TOKEN_CHARS = re.compile(r"[A-Za-z0-9_-]{1,256}")
"""Every character a token may have (``hat_<hex id>_<urlsafe secret>``)."""


@dataclass(frozen=True, slots=True)
class Caller:
    token: TokenInfo

    @property
    def account_id(self) -> str:
        return self.token.account_id

    @property
    def namespace(self) -> str:
        """What ``ids.mint_root`` prefixes: ids look like ``web_<accountId>_<ms>_<rand>``."""
        return f"{WEB_NAMESPACE}_{self.token.account_id}"

    def in_namespace(self, session_id: str) -> bool:
        return ids.root_of(session_id).startswith(self.namespace + "_")

    def may_address(self, session_id: str) -> bool:
        return self.token.access == "full" or self.in_namespace(session_id)

    def require_write(self) -> None:
        if self.token.access == "readonly":
            raise ApiError(403, READ_ONLY)


async def authenticate(
    tokens: TokenCache, headers: Mapping[str, str], query: Mapping[str, str]
) -> Caller:
    presented = headers.get("x-token") or query.get("token") or ""
    if not presented:
        raise ApiError(401, MISSING_TOKEN)
    if not TOKEN_CHARS.fullmatch(presented):
        raise ApiError(401, MALFORMED_TOKEN)
    info = await tokens.lookup(presented)
    if info is None:
        raise ApiError(401, BAD_TOKEN)
    return Caller(info)


def pick(
    body_value: str | None,
    query: Mapping[str, str],
    headers: Mapping[str, str],
    name: str,
    header: str,
) -> str | None:
    """An override: body, else query, else header; empty counts as absent. A value given
    in more than one place passes the syntax check of its kind in each (``_SYNTAX``), the
    ones not used too: bad input is refused wherever it is, never shadowed by good."""
    given = [v for v in (body_value, query.get(name), headers.get(header)) if v]
    for shadowed in given[1:]:
        _SYNTAX[name](shadowed)
    return given[0] if given else None


def _workspace_syntax(raw: str) -> str:
    if not os.path.isabs(raw) or "\x00" in raw:
        raise ApiError(400, "workspace must be an absolute path")
    return raw


def _session_id_syntax(raw: str) -> str:
    if not ids.is_safe_session_id(raw):
        raise ApiError(400, "invalid sessionId: not a safe session id")
    return raw


_SYNTAX = {"workspace": _workspace_syntax, "sessionId": _session_id_syntax}


def resolve_workspace(caller: Caller, raw: str | None) -> str:
    bound = caller.token.workspace
    if raw is None:
        return bound
    _workspace_syntax(raw)
    real = os.path.realpath(raw)
    if real == bound:
        return bound
    if caller.token.access != "full":
        raise ApiError(403, WORKSPACE_NOT_ALLOWED)
    if not os.path.isdir(real):
        raise ApiError(400, "workspace is not a directory")
    return real


def check_session_id(caller: Caller, raw: str) -> str:
    _session_id_syntax(raw)
    if not caller.may_address(raw):
        raise ApiError(403, NOT_OWNED)
    return raw


class ActiveSessions:
    """Per (workspace, account): the session a request without ``sessionId`` means."""

    def __init__(self) -> None:
        self._pointer: dict[tuple[str, str], str] = {}

    def set(self, workspace: str, caller: Caller, session_id: str) -> None:
        self._pointer[(workspace, caller.account_id)] = session_id

    async def resolve(self, workspace: str, caller: Caller, sup: Supervisor | None) -> str:
        key = (workspace, caller.account_id)
        current = self._pointer.get(key)
        if current is not None and (sup is None or not _gone(sup, current)):
            return current
        latest = await latest_root(sup, caller) if sup is not None else None
        chosen = latest or ids.mint_root(caller.namespace)
        self._pointer[key] = chosen
        return chosen


def _gone(sup: Supervisor, session_id: str) -> bool:
    """Archived or deleted; a minted id not created yet is not gone."""
    return sup.was_deleted(session_id) or (sup.exists(session_id) and not sup.is_live(session_id))


async def own_roots(sup: Supervisor, caller: Caller) -> list[tuple[str, int]]:
    """The caller's live (not archived or deleted) roots as ``(id, updated_ts)``: with a
    shared log, every node's, from the database (any node serves any request)."""
    everywhere = await sup.owner.roots(caller.namespace + "_")
    if everywhere is not None:
        return everywhere
    return [
        (sid, updated)
        for sid, updated, lifecycle in sup.roots()  # none rebuilt (passivation.md)
        if caller.in_namespace(sid) and lifecycle not in ("archived", "deleted")
    ]


async def latest_root(sup: Supervisor, caller: Caller) -> str | None:
    roots = await own_roots(sup, caller)
    return max(roots, key=lambda r: r[1])[0] if roots else None
