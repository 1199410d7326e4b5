"""The web channel's HTTP routes (``docs/http.md``); the WebSocket lives in ``ws``.

Each route checks, in this order: token (401), body (400/413), workspace override
(403/400), session id (400 unsafe, 403 not owned), access level (403 for a read-only
token on a writing route). Only then does it touch a runtime. Read routes never
create a workspace's ``.halo/``.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import TypeVar

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...runtime.supervisor import Supervisor
from ...tools.files import Workspace
from .addressing import Caller, check_session_id, own_roots, pick
from .app import Front, front_of
from .body import (
    ChatBody,
    MintBody,
    StopBody,
    check_chat,
    digits,
    parse_body,
    resume_after,
    resume_id,
)
from .commands import command_stream, parse_command
from .errors import SESSION_NOT_FOUND, ApiError
from .frames import Frame, complete_frame, session_frame
from .remote import LogView, owned_here, reader_for
from .served import ServedFile
from .sse import EventStream, StreamPlan
from .streams import ChatPlan, FixedPlan, SubscribePlan, is_busy

T = TypeVar("T")
PAGE_SIZE = 50


_encoder = msgspec.json.Encoder()


def _json(body: object) -> Response:
    """A JSON answer encoded by msgspec (several times faster than ``json.dumps``)."""
    return Response(_encoder.encode(body), media_type="application/json")


async def _json_off_loop(body: object) -> Response:
    """A JSON answer that may be large, encoded in a worker thread (never on the loop)."""
    encoded = await trio.to_thread.run_sync(_encoder.encode, body)
    return Response(encoded, media_type="application/json")


def stream(front: Front, caller: Caller, plan: StreamPlan) -> EventStream:
    ticket = front.open_stream(caller)
    return EventStream(
        plan,
        keepalive=front.settings.keepalive,
        coalesce=front.settings.coalesce,
        draining=front.draining,
        on_close=ticket.release,
        revoked=ticket.revoked,
    )


async def _body(front: Front, request: Request, kind: type[T], *, optional: bool = False) -> T:
    settings = front.settings
    return await parse_body(
        request, kind, settings.max_body_bytes, optional=optional, within=settings.body_timeout
    )


async def _address(
    front: Front, request: Request, caller: Caller, ws_raw: str | None, sid_raw: str | None
) -> tuple[str, str | None]:
    """(workspace, explicit session id or None), overrides checked."""
    q, h = request.query_params, request.headers
    workspace = await front.workspace(caller, pick(ws_raw, q, h, "workspace", "x-workspace"))
    explicit = pick(sid_raw, q, h, "sessionId", "x-session-id")
    return workspace, check_session_id(caller, explicit) if explicit is not None else None


async def chat(request: Request) -> Response:
    front = front_of(request)
    caller = await front.caller(request)
    front.charge(caller, "chat")
    body = await _body(front, request, ChatBody)
    check_chat(body)
    workspace, explicit = await _address(front, request, caller, body.workspace, body.session_id)
    caller.require_write()
    sup = await front.runtimes.get(workspace)
    assert sup is not None
    session_id = explicit or await front.active.resolve(workspace, caller, sup)
    await sup.here(session_id)  # a tree owned by another node: its messages are forwarded
    command = parse_command(body.message)
    if command is not None:
        plan = await command_stream(front, caller, sup, workspace, session_id, command)
        return stream(front, caller, plan)
    plan = ChatPlan(
        sup,
        session_id,
        body.message,
        tuple(body.images),
        body.agent_id,
        front.settings.subscriber_buffer,
        caller.token.access,
    )
    return stream(front, caller, plan)


async def mint_session(request: Request) -> Response:
    front = front_of(request)
    caller = await front.caller(request)
    front.charge(caller, "mint")
    body = await _body(front, request, MintBody, optional=True)
    workspace, _ = await _address(front, request, caller, body.workspace, None)
    caller.require_write()
    sup = await front.runtimes.get(workspace)
    assert sup is not None
    session_id = await sup.create_session(
        namespace=caller.namespace, agent_id=body.agent_id or "default", access=caller.token.access
    )
    return _json({"sessionId": session_id})


async def list_sessions(request: Request) -> Response:
    front = front_of(request)
    caller = await front.caller(request)
    cursor = digits(request.query_params.get("cursor"), "cursor")
    workspace, _ = await _address(front, request, caller, None, None)
    sup = await front.runtimes.get(workspace, create=False)
    rows = await _page(sup, caller, cursor, PAGE_SIZE + 1) if sup is not None else []
    more, rows = len(rows) > PAGE_SIZE, rows[:PAGE_SIZE]
    next_cursor = rows[-1]["updatedAt"] if more else None
    page = {"workspace": workspace, "sessions": rows, "nextCursor": next_cursor}
    return await _json_off_loop(page)  # 50 titles may be long


async def _page(
    sup: Supervisor, caller: Caller, cursor: int | None, size: int
) -> list[dict[str, object]]:
    roots = sorted(await own_roots(sup, caller), key=lambda r: (r[1], r[0]), reverse=True)
    page = [(sid, updated) for sid, updated in roots if cursor is None or updated < cursor]
    page = page[:size]
    # With a shared log the page may hold trees of other nodes: titles from the database.
    titles = await sup.owner.titles([sid for sid, _ in page])
    rows: list[dict[str, object]] = []
    for session_id, updated in page:
        if session_id in titles:
            title = titles[session_id]
        else:
            state = await sup.load(session_id)  # a passivated one is rebuilt off the loop
            title = state.title or state.description or None
        rows.append({"sessionId": session_id, "title": title, "updatedAt": updated})
    return rows


async def stop(request: Request) -> Response:
    front = front_of(request)
    caller = await front.caller(request)
    body = await _body(front, request, StopBody, optional=True)
    workspace, explicit = await _address(front, request, caller, body.workspace, body.session_id)
    caller.require_write()
    sup = await front.runtimes.get(workspace, create=False)
    session_id = explicit or await front.active.resolve(workspace, caller, sup)
    if sup is not None:
        await sup.claim(session_id, create=False)
    if sup is None or not sup.exists(session_id):
        return _json({"stopped": False})
    return _json({"stopped": await sup.stop(session_id)})


async def history(request: Request) -> Response:
    front = front_of(request)
    caller = await front.caller(request)
    q, limits = request.query_params, front.settings.limits
    since = digits(q.get("since"), "since")
    before = digits(q.get("before"), "before")
    limit = digits(q.get("limit"), "limit")
    if limit is not None and not 0 < limit <= limits.history_max_limit:
        raise ApiError(400, f"Invalid limit (1 to {limits.history_max_limit})")
    workspace, explicit = await _address(front, request, caller, None, None)
    sup = await front.runtimes.get(workspace, create=False)
    session_id = explicit or await front.active.resolve(workspace, caller, sup)
    reader = await reader_for(sup, session_id) if sup is not None else None  # owner, or the log
    if reader is None or not reader.exists(session_id):
        if explicit is not None:
            raise ApiError(404, SESSION_NOT_FOUND)
        empty = {"sessionId": session_id, "messages": [], "running": False, "nextBefore": None}
        return _json(empty)
    page = await front.history.page(
        reader,
        session_id,
        since=since,
        before=before,
        limit=limit or limits.history_limit,
        max_bytes=limits.history_max_bytes,
    )
    running = is_busy(reader, session_id)
    body = {"sessionId": session_id, "messages": msgspec.Raw(page.messages), "running": running}
    return _json(body | {"nextBefore": page.next_before})


async def subscribe(request: Request) -> Response:
    front = front_of(request)
    caller = await front.caller(request)
    after = resume_after(resume_id, request.headers, request.query_params)
    workspace, explicit = await _address(front, request, caller, None, None)
    sup = await front.runtimes.get(workspace, create=False)
    session_id = explicit or await front.active.resolve(workspace, caller, sup)
    local = sup is not None and await owned_here(sup, session_id)
    if sup is None or not (
        sup.exists(session_id)
        if local
        else (await LogView.load(sup, session_id)).exists(session_id)
    ):
        if explicit is not None:
            raise ApiError(404, SESSION_NOT_FOUND)
        cursor = sup.log.last_seq if sup is not None else 0
        cursor = max(cursor, after.seq) if after is not None else cursor  # ids only grow

        async def idle(_: AsyncExitStack) -> list[Frame]:
            return [session_frame(cursor, session_id), complete_frame(cursor)]

        return stream(front, caller, FixedPlan(idle))
    buffer = front.settings.subscriber_buffer
    return stream(front, caller, SubscribePlan(sup, session_id, after, buffer, remote=not local))


async def serve_file(request: Request) -> Response:
    front = front_of(request)
    caller = await front.caller(request)
    rel = request.query_params.get("path", "")
    if not rel:
        raise ApiError(400, "path is required")
    workspace, _ = await _address(front, request, caller, None, None)
    fd, name = await _open(workspace, rel, front.hidden_state)
    return ServedFile.opened(fd, name)


async def _open(workspace: str, rel: str, hidden: tuple[str, ...]) -> tuple[int, str]:
    """The file opened without a race against a command swapping in symlinks."""

    def open_() -> tuple[int, str]:
        return Workspace(workspace, hidden=hidden).open_for_serving(rel)

    return await trio.to_thread.run_sync(open_)


ROUTES = [
    Route("/api/web/chat", chat, methods=["POST"]),
    Route("/api/web/sessions", mint_session, methods=["POST"]),
    Route("/api/web/sessions", list_sessions, methods=["GET"]),
    Route("/api/web/stop", stop, methods=["POST"]),
    Route("/api/web/history", history, methods=["GET"]),
    Route("/api/web/subscribe", subscribe, methods=["GET"]),
    Route("/api/web/file", serve_file, methods=["GET"]),
]
