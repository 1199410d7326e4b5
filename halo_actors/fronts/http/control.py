"""A person's controls over a session: ``POST /api/web/interrupt`` and ``/api/web/archive``.

Same checks, in the same order, as every route (``routes``): token, body, workspace
override, session id (safe, owned unless ``full``), then write access. The target is
the explicit ``sessionId`` or the account's active session.

- ``interrupt`` (``{mode: "soft" | "hard"}``) queues nothing: ``soft`` makes the
  running turn yield at its next batch boundary (as a queued message does), ``hard``
  cuts it now and kills its running command's process group. ``{"interrupted":
  false}`` when no turn is running (an idle, unknown or stopped session).
- ``archive`` discards the mailbox, stops the subtree and hides it from lists; it
  answers after the cascade has finished: ``{"archived": true}`` when this request
  archived it, ``false`` when there was nothing to archive (unknown, or archived
  already).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .app import front_of
from .body import InterruptBody, StopBody
from .routes import _address, _body, _json


async def interrupt(request: Request) -> Response:
    front = front_of(request)
    caller = await front.caller(request)
    body = await _body(front, request, InterruptBody)
    workspace, explicit = await _address(front, request, caller, body.workspace, body.session_id)
    caller.require_write()
    sup = await front.runtimes.get(workspace, create=False)
    session_id = explicit or await front.active.resolve(workspace, caller, sup)
    if sup is not None:
        await sup.claim(session_id, create=False)
    if sup is None or not sup.exists(session_id):
        return _json({"interrupted": False})
    return _json({"interrupted": await sup.interrupt_turn(session_id, body.mode)})


async def archive(request: Request) -> Response:
    front = front_of(request)
    caller = await front.caller(request)
    body = await _body(front, request, StopBody, optional=True)
    workspace, explicit = await _address(front, request, caller, body.workspace, body.session_id)
    caller.require_write()
    sup = await front.runtimes.get(workspace, create=False)
    session_id = explicit or await front.active.resolve(workspace, caller, sup)
    if sup is not None:
        await sup.claim(session_id, create=False)
    if sup is None or not sup.is_live(session_id):
        return _json({"archived": False})
    await sup.archive(session_id)
    return _json({"archived": sup.state(session_id).lifecycle == "archived"})


CONTROL_ROUTES = [
    Route("/api/web/interrupt", interrupt, methods=["POST"]),
    Route("/api/web/archive", archive, methods=["POST"]),
]
