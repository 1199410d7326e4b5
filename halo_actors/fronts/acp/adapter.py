"""ACP methods → HTTP front calls; the adapter keeps no state on disk.

State, all in memory: the sessions this process knows (created or loaded here;
ACP sessionId == server session id) and at most one in-flight
:class:`~.turn.PromptTurn` per session. A second prompt while one is in flight
is refused with -32600; a prompt for a session neither created nor loaded here
with -32602. Losing this state on restart is harmless: the conversation lives
on the server, and ``session/load`` registers an id again. See ``docs/acp.md``
and, for what the specification leaves open, ``docs/design/acp.md``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import trio

from halo_actors.core.logger import get_logger

from ... import __version__
from .client import HaloClient, ServerError
from .errors import rpc_error
from .jsonrpc import INVALID_PARAMS, INVALID_REQUEST, Handler, JsonRpcPeer, Params, RpcError
from .prompt import compose_prompt
from .turn import BACKOFF, PromptTurn
from .updates import Update, replay_updates

AUTH_METHODS: tuple[str, ...] = ()
"""The ``authMethods`` ids ``initialize`` advertises (none: the token is on the command line)."""
log = get_logger("halo_actors.acp")
PROTOCOL_VERSION = 1
AGENT_INFO = {"name": "halo_actors", "title": "halo_actors", "version": __version__}


def _session_id(params: Params) -> str:
    sid = params.get("sessionId")
    if not isinstance(sid, str) or not sid:
        raise RpcError(INVALID_PARAMS, "sessionId is required")
    return sid


def _same_directory(a: str, b: str) -> bool:
    """Lexically equal after normalising, or the same directory on this machine."""
    if os.path.normpath(a) == os.path.normpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class Adapter:
    def __init__(
        self, client: HaloClient, nursery: trio.Nursery, backoff: tuple[float, ...] = BACKOFF
    ) -> None:
        self._client = client
        self._nursery = nursery
        self._backoff = backoff
        self._known: set[str] = set()
        """Session ids created or loaded by this process."""
        self._turns: dict[str, PromptTurn] = {}
        """The in-flight prompt of each busy session."""
        self.peer: JsonRpcPeer | None = None

    def handlers(self) -> dict[str, Handler]:
        return {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.new_session,
            "session/load": self.load_session,
            "session/list": self.list_sessions,
            "session/prompt": self.prompt,
            "session/cancel": self.cancel_request,
        }

    async def _update(self, session_id: str, update: Update) -> None:
        assert self.peer is not None, "bound by run_adapter"
        await self.peer.notify("session/update", {"sessionId": session_id, "update": update})

    async def initialize(self, params: Params) -> object:
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "sessionCapabilities": {"list": {}},
                "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
            },
            "authMethods": list(AUTH_METHODS),
            "agentInfo": AGENT_INFO,
        }

    async def authenticate(self, params: Params) -> object:
        """Only an advertised method is accepted; there are none (the token comes with
        the command line), so every ``methodId`` is refused with -32602."""
        method = params.get("methodId")
        if method not in AUTH_METHODS:
            shown = repr(method)[:80]
            raise RpcError(
                INVALID_PARAMS,
                f"unknown authentication method {shown}: this agent advertises none "
                "(the token comes with the command line)",
            )
        return {}

    async def new_session(self, params: Params) -> object:
        try:
            sid = await self._client.new_session()
        except ServerError as exc:
            raise rpc_error(exc, "cannot create a session") from None
        self._known.add(sid)
        return {"sessionId": sid}

    async def load_session(self, params: Params) -> object:
        """Replay the whole history as updates, all before the answer; then register the id."""
        sid = _session_id(params)
        try:
            rows = await self._client.whole_history(sid)
        except ServerError as exc:
            raise rpc_error(exc, f"cannot load session {sid}") from None
        for update in replay_updates(rows):
            await self._update(sid, update)
        self._known.add(sid)
        return {}

    async def list_sessions(self, params: Params) -> object:
        cursor = params.get("cursor")
        if cursor is not None and not (
            isinstance(cursor, str) and (cursor == "" or (cursor.isascii() and cursor.isdigit()))
        ):
            raise RpcError(INVALID_PARAMS, "cursor must be one this agent returned (digits)")
        try:
            body = await self._client.list_sessions(cursor or None)
        except ServerError as exc:
            raise rpc_error(exc, "cannot list sessions") from None
        workspace = str(body.get("workspace", ""))
        cwd = params.get("cwd")
        if isinstance(cwd, str) and cwd and not _same_directory(cwd, workspace):
            return {"sessions": []}
        rows = body.get("sessions")
        listed = rows if isinstance(rows, list) else []
        answer: dict[str, object] = {
            "sessions": [_listed(row, workspace) for row in listed if isinstance(row, dict)]
        }
        if body.get("nextCursor") is not None:
            answer["nextCursor"] = str(body["nextCursor"])
        return answer

    async def prompt(self, params: Params) -> object:
        sid = _session_id(params)
        if sid not in self._known:
            raise RpcError(
                INVALID_PARAMS, f"unknown session {sid}: use session/new or session/load"
            )
        blocks = params.get("prompt")
        if not isinstance(blocks, list) or not blocks:
            raise RpcError(INVALID_PARAMS, "prompt must be a non-empty list of content blocks")
        if sid in self._turns:
            raise RpcError(INVALID_REQUEST, "a prompt is already in flight for this session")
        composed = compose_prompt(blocks)
        for kind in composed.dropped:
            log.warning("acp_block_dropped", block_type=kind, session_id=sid)
        if not composed.message.strip() and not composed.images:
            raise RpcError(INVALID_PARAMS, "the prompt has no usable content")

        async def send(update: Update) -> None:
            await self._update(sid, update)

        turn = PromptTurn(
            self._client, sid, composed.message, composed.images, send, self._nursery, self._backoff
        )
        self._turns[sid] = turn
        try:
            return {"stopReason": await turn.run()}
        finally:
            del self._turns[sid]

    async def cancel(self, params: Params) -> None:
        """``session/cancel`` (a notification); an idle or unknown session: nothing to do."""
        sid = params.get("sessionId")
        turn = self._turns.get(sid) if isinstance(sid, str) else None
        if turn is not None:
            turn.cancel()

    async def cancel_request(self, params: Params) -> object:
        """The request form of ``session/cancel``: same effect, answered ``null``."""
        await self.cancel(params)
        return None

    def abandon_all(self) -> None:
        """End of input: end every prompt now (the server's turns go on)."""
        for turn in self._turns.values():
            turn.abandon()


def _listed(row: dict[object, object], workspace: str) -> dict[str, object]:
    entry: dict[str, object] = {"sessionId": row.get("sessionId"), "cwd": workspace}
    title = row.get("title")
    if isinstance(title, str) and title:
        entry["title"] = title
    updated = row.get("updatedAt")
    if isinstance(updated, int):
        stamp = datetime.fromtimestamp(updated / 1000, UTC).isoformat(timespec="milliseconds")
        entry["updatedAt"] = stamp.replace("+00:00", "Z")
    return entry
