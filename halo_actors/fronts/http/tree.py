"""``/api/web/tree``: every event of one session tree, as SSE (``GET``) or a WebSocket.

A watcher (the web page, ``python -m halo_actors watch``) folds the records into the
tree's state with the runtime's own rules, so the stream carries **every** stored
record of every session whose root is the addressed session's root, exactly as
stored (``{"seq", "sessionId", "ts", "event": {"type", …}}``), internal facts
included: parents, mailboxes, flags, stops and archives are what a tree view shows.

Rules (those of ``/subscribe`` where they apply):

- ``sessionId`` is required (any session of the tree; 400 without one), safe, and
  owned unless the token is ``full`` (403); a tree that does not exist is 404. A
  deleted tree is gone (404); an archived one can still be read.
- The stream opens with ``{"type": "tree", "sessionId": <root>, "cursor": N}``, then
  the records after ``N``: without a resume id ``N`` is 0 (the whole tree from its
  first record, so a new watcher can fold it); with ``Last-Event-ID`` (header, or the
  ``lastEventId`` query) it is that id, and the stream carries exactly the records
  after it. Every frame's id is its record's ``seq`` (the opening frame's is ``N``):
  no gap, no duplicate.
- The stream never ends by itself: it ends when the client leaves, when the server
  drains, when the token is revoked, or when the listener's bounded buffer overflows
  (a slow client; the client resumes from its last id). It counts against the
  token's open-stream limit (429 past it), like every stream. SSE sends ``: keepalive`` while idle and ``retry:``
  (``sse.RETRY_MS``) so browsers come back quickly. The WebSocket closes 1013 (with
  the id to resume after) on overflow, 1001 on drain and 1008 on revocation; inbound
  messages are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from ...core import ids
from ...core.errors import HaloError, SubscriptionClosed, SubscriptionOverflow
from ...core.events import Record, encode_record
from ...core.log import EventFilter, Subscription
from ...runtime.supervisor import Supervisor
from .addressing import Caller, authenticate, check_session_id, pick
from .app import Front, front_of
from .body import digits, resume_after
from .errors import SESSION_NOT_FOUND, ApiError, error_response
from .frames import Frame
from .remote import reader_for
from .routes import stream
from .ws import (
    CLOSE_GOING_AWAY,
    CLOSE_TRY_AGAIN,
    _until_client_leaves,
    _until_draining,
    _until_revoked,
)

_encoder = msgspec.json.Encoder()


@dataclass(frozen=True)
class TreeTarget:
    caller: Caller
    sup: Supervisor
    root: str
    after: int


async def _target(front: Front, query: Mapping[str, str], headers: Mapping[str, str]) -> TreeTarget:
    """Token, resume id, workspace, then the tree (every refusal before a byte is sent)."""
    caller = await authenticate(front.tokens, headers, query)
    after = resume_after(digits, headers, query) or 0
    workspace = await front.workspace(
        caller, pick(None, query, headers, "workspace", "x-workspace")
    )
    explicit = pick(None, query, headers, "sessionId", "x-session-id")
    if explicit is None:
        raise ApiError(400, "sessionId is required: the tree of which session?")
    root = ids.root_of(check_session_id(caller, explicit))
    sup = await front.runtimes.get(workspace, create=False)
    # The owner's runtime, or (another node owns the tree) the shared log: any node streams it.
    reader = await reader_for(sup, root) if sup is not None else None
    if sup is None or reader is None or not reader.exists(root):
        raise ApiError(404, SESSION_NOT_FOUND)
    return TreeTarget(caller, sup, root, after)


def opening(target: TreeTarget) -> dict[str, object]:
    return {"type": "tree", "sessionId": target.root, "cursor": target.after}


def record_frame(record: Record) -> Frame:
    return Frame(record.seq, msgspec.to_builtins(record))


@dataclass
class TreePlan:
    """The SSE side: open the tree's subscription, then forward every record."""

    target: TreeTarget
    buffer: int
    _sub: Subscription | None = field(default=None, init=False)

    async def open(self, stack: AsyncExitStack) -> list[Frame]:
        t = self.target
        flt = EventFilter(tree=t.root)
        self._sub = await stack.enter_async_context(
            t.sup.log.subscribe(flt, t.after, buffer_size=self.buffer)
        )
        return [Frame(t.after, opening(t))]

    async def pump(self, out: trio.MemorySendChannel[Frame]) -> None:
        assert self._sub is not None, "open() runs first"
        try:
            async for record in self._sub:
                await out.send(record_frame(record))
        except SubscriptionClosed:  # an overflow (slow client) or the log closing
            return


async def tree_sse(request: Request) -> Response:
    front = front_of(request)
    target = await _target(front, request.query_params, request.headers)
    return stream(front, target.caller, TreePlan(target, front.settings.subscriber_buffer))


async def tree_ws(websocket: WebSocket) -> None:
    front = websocket.app.state.front
    assert isinstance(front, Front)
    try:
        target = await _target(front, websocket.query_params, websocket.headers)
        ticket = front.open_stream(target.caller)
    except (ApiError, HaloError) as exc:
        await websocket.send_denial_response(error_response(exc))
        return
    try:
        flt = EventFilter(tree=target.root)
        buffer = front.settings.subscriber_buffer
        async with target.sup.log.subscribe(flt, target.after, buffer_size=buffer) as sub:
            await websocket.accept()
            await websocket.send_text(_encoder.encode(opening(target)).decode())
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_until_client_leaves, websocket, nursery.cancel_scope)
                nursery.start_soon(_until_draining, front, websocket, nursery.cancel_scope)
                nursery.start_soon(_until_revoked, ticket.revoked, websocket, nursery.cancel_scope)
                await _forward(websocket, sub)
                nursery.cancel_scope.cancel()
    finally:
        ticket.release()


async def _forward(websocket: WebSocket, sub: Subscription) -> None:
    try:
        async for record in sub:
            await websocket.send_text(encode_record(record).decode())
    except SubscriptionOverflow as exc:
        reason = f"subscriber fell behind; resume with lastEventId={exc.resume_after}"
        await websocket.close(CLOSE_TRY_AGAIN, reason)
    except SubscriptionClosed:
        await websocket.close(CLOSE_GOING_AWAY, "the server is shutting down")


TREE_ROUTES = [
    Route("/api/web/tree", tree_sse, methods=["GET"]),
    WebSocketRoute("/api/web/tree", tree_ws),
]
