"""``/api/web/ws``: the WebSocket push channel for block-oriented consumers.

Same token and addressing rules as the SSE routes (token, ``workspace``,
``sessionId`` from the query string or headers; ``lastEventId`` to resume). A
refused handshake gets the same JSON error body and status as HTTP, sent as the
WebSocket denial response. After ``accept`` the server sends, as JSON text
messages: a ``session`` frame, then every client frame of the session with its
``seq``, including ``complete`` frames **with** ``batchBoundary`` (present even
when false). The channel does not end at a ``complete``; it ends when the client
closes (any code, 1006 included), when the listener overflows (close 1013 with the
cursor to resume after), when the server drains (close 1001), or when the token is
revoked (close 1008). A token past its open-stream limit is denied with 429. Inbound messages
are ignored. A plain HTTP ``GET`` of the route (no upgrade) is answered ``426``.
"""

from __future__ import annotations

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from ...core.errors import HaloError, SubscriptionClosed, SubscriptionOverflow
from ...core.log import EventFilter, Subscription
from ...core.logger import get_logger
from .addressing import Caller, authenticate, check_session_id, pick
from .app import Front
from .body import resume_id
from .errors import ApiError, error_response
from .frames import Projector, Resume, encode_push, session_frame
from .remote import LogView, owned_here
from .streams import media_state_at

log = get_logger("halo_actors.http")
CLOSE_GOING_AWAY = 1001
CLOSE_TRY_AGAIN = 1013
CLOSE_POLICY = 1008


UPGRADE_REQUIRED = "this route needs a WebSocket upgrade"


async def upgrade_required(request: Request) -> Response:
    """The route's plain-HTTP answer: it speaks WebSocket only."""
    return JSONResponse(
        {"error": UPGRADE_REQUIRED},
        status_code=426,
        headers={"upgrade": "websocket", "connection": "upgrade"},
    )


async def push(websocket: WebSocket) -> None:
    front = websocket.app.state.front
    assert isinstance(front, Front)
    try:
        caller, workspace, session_id, after = await _target(front, websocket)
        sup = await front.runtimes.get(workspace)
        assert sup is not None
        local = await owned_here(sup, session_id)  # else another node owns it: read the log
        ticket = front.open_stream(caller)
    except (ApiError, HaloError) as exc:
        await websocket.send_denial_response(error_response(exc))
        return
    assert sup is not None
    flt = EventFilter(session_id=session_id)
    cursor = sup.log.last_seq if after is None else after.after_seq
    try:
        buffer = front.settings.subscriber_buffer
        async with sup.log.subscribe(flt, cursor, buffer_size=buffer) as sub:
            reader = sup if local else await LogView.load(sup, session_id)
            media = await media_state_at(reader, session_id, cursor)
            await websocket.accept()
            await websocket.send_text(encode_push(session_frame(cursor, session_id)))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_until_client_leaves, websocket, nursery.cancel_scope)
                nursery.start_soon(_until_draining, front, websocket, nursery.cancel_scope)
                nursery.start_soon(_until_revoked, ticket.revoked, websocket, nursery.cancel_scope)
                await _forward(websocket, sub, Projector(push=True, media=media, skip=after))
                nursery.cancel_scope.cancel()
    finally:
        ticket.release()


async def _target(front: Front, websocket: WebSocket) -> tuple[Caller, str, str, Resume | None]:
    q, h = websocket.query_params, websocket.headers
    caller = await authenticate(front.tokens, h, q)
    workspace = await front.workspace(caller, pick(None, q, h, "workspace", "x-workspace"))
    explicit = pick(None, q, h, "sessionId", "x-session-id")
    after = resume_id(q.get("lastEventId") or h.get("last-event-id"), "lastEventId")
    if explicit is not None:
        return caller, workspace, check_session_id(caller, explicit), after
    sup = await front.runtimes.get(workspace, create=False)
    return caller, workspace, await front.active.resolve(workspace, caller, sup), after


async def _forward(websocket: WebSocket, sub: Subscription, projector: Projector) -> None:
    try:
        async for record in sub:
            for frame in projector.project(record):
                await websocket.send_text(encode_push(frame))
    except SubscriptionOverflow as exc:
        reason = f"subscriber fell behind; resume with lastEventId={exc.resume_after}"
        await websocket.close(CLOSE_TRY_AGAIN, reason)
    except SubscriptionClosed:
        await websocket.close(CLOSE_GOING_AWAY, "the server is shutting down")


async def _until_client_leaves(websocket: WebSocket, scope: trio.CancelScope) -> None:
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
    except WebSocketDisconnect:
        pass
    scope.cancel()


async def _until_revoked(
    revoked: trio.Event, websocket: WebSocket, scope: trio.CancelScope
) -> None:
    await revoked.wait()
    with trio.CancelScope(shield=True, deadline=trio.current_time() + 1):
        await websocket.close(CLOSE_POLICY, "the token was revoked")
    scope.cancel()


async def _until_draining(front: Front, websocket: WebSocket, scope: trio.CancelScope) -> None:
    await front.draining.wait()
    with trio.CancelScope(shield=True, deadline=trio.current_time() + 1):
        await websocket.close(CLOSE_GOING_AWAY, "the server is shutting down")
    scope.cancel()
