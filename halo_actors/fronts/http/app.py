"""The Starlette app and the state its routes share (:class:`Front`).

``build_app(front)`` mounts every route of ``docs/http.md`` plus ``/api/openapi.json``,
CORS (any origin, the ``x-token``/``x-workspace``/``x-session-id``/``last-event-id``
headers allowed; a refused preflight is JSON too) and the error handlers: ``ApiError`` and ``HaloError`` through the
one table in ``errors``, Starlette's own 404/405 as JSON, anything else as
``500 {"error": "internal error"}`` (logged with its traceback on stderr, never
sent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from ...agent.model import Model
from ...core.errors import HaloError
from ...core.log import DEFAULT_SUBSCRIBER_BUFFER
from ...core.logger import get_logger
from ...runtime.ownership import ClusterStore
from ...runtime.passivation import DEFAULT_RESIDENT_IDLE
from ...tools.base import Tool
from ...tools.files import HALO_DIR
from .addressing import ActiveSessions, Caller, authenticate, resolve_workspace
from .errors import INTERNAL, ApiError, error_body, error_response
from .history import HistoryCache
from .limits import Kind, Quotas, StreamTicket, TokenLimits
from .runtimes import Runtimes
from .tokens import TokenBackend, TokenCache

log = get_logger("halo_actors.http")

EXPOSED_HEADERS = ("x-token", "x-workspace", "x-session-id", "last-event-id", "content-type")


@dataclass(frozen=True)
class FrontSettings:
    tokens: TokenBackend
    keepalive: float = 15.0
    """Idle seconds before an SSE stream sends ``: keepalive``."""
    coalesce: float = 0.002
    """Seconds an SSE writer waits for more frames to share one write (0: only what is ready).
    Fewer, larger writes let one server feed many more clients; it adds at most this
    much latency."""
    max_body_bytes: int = 4 << 20
    body_timeout: float = 30.0
    """Seconds a request body may take to arrive in full; slower → 408 (slow-loris bodies)."""
    send_timeout: float = 30.0
    """Seconds data sent to a client may stay unacknowledged (a client that stopped
    reading, or vanished) before the kernel drops the connection (``TCP_USER_TIMEOUT``
    on the listening socket). Without it such a connection, and the task writing to
    it, would live forever, and shutdown would wait for it."""
    subscriber_buffer: int = DEFAULT_SUBSCRIBER_BUFFER
    """Records one stream's listener may hold before it overflows (and closes)."""
    model: Model | str | None = None
    """The model every runtime uses: a ``Model``, a spec (``"anthropic:<model>"``,
    ``"openai:<model>"``; endpoint and key from the environment), or None for the
    scripted demo agent. Profiles may name models of their own."""
    tools: tuple[Tool, ...] = ()
    resident_idle: int | None = DEFAULT_RESIDENT_IDLE
    """Sessions at rest each runtime keeps in memory (None: all; ``docs/design/passivation.md``)."""
    """Custom tools (``@tool``) every runtime offers beside the built-ins."""
    token_reload: float = 0.5
    """Seconds between checks of the token file: a revoked token stops working, and its
    open streams end, within this (plus one read of the file)."""
    limits: TokenLimits = field(default_factory=TokenLimits)
    """Per-token limits: open streams, mints and chats per minute, history pages."""
    cluster: ClusterStore | None = None
    """Keep every workspace's log in this PostgreSQL database, shared with other nodes
    (``docs/deploy.md``); None: each workspace's SQLite file under ``.halo/``."""


@dataclass
class Front:
    """Shared by every route of one server."""

    settings: FrontSettings
    runtimes: Runtimes
    draining: trio.Event = field(default_factory=trio.Event)
    """Set when the server starts shutting down: open streams end cleanly."""
    active: ActiveSessions = field(default_factory=ActiveSessions)
    history: HistoryCache = field(default_factory=HistoryCache)
    tokens: TokenCache = field(init=False)
    quotas: Quotas = field(init=False)

    def __post_init__(self) -> None:
        self.quotas = Quotas(self.settings.limits)
        self.tokens = TokenCache(
            self.settings.tokens,
            reload_every=self.settings.token_reload,
            on_revoked=self.quotas.revoke,
        )

    @property
    def hidden_state(self) -> tuple[str, ...]:
        """Never served, for any level: the token state directory and the token file."""
        store = self.settings.tokens
        return (str(store.state_dir), str(store.path))

    async def caller(self, request: Request) -> Caller:
        return await authenticate(self.tokens, request.headers, request.query_params)

    async def workspace(self, caller: Caller, raw: str | None) -> str:
        if raw is None:
            return caller.token.workspace
        return await trio.to_thread.run_sync(resolve_workspace, caller, raw)

    def hidden_paths(self) -> list[str]:
        """What a sandboxed command must not see even inside its workspace: the token
        state directory and the runtime state of every token's workspace."""
        workspaces = self.tokens.workspaces()
        return [str(self.settings.tokens.state_dir), *(f"{w}/{HALO_DIR}" for w in workspaces)]

    def open_stream(self, caller: Caller) -> StreamTicket:
        """A slot for one SSE stream or WebSocket of ``caller``: 429 past its token's
        limit; its ``revoked`` is set if the token is revoked. Release it once closed."""
        return self.quotas.open_stream(caller.token.sha256)

    @property
    def open_streams(self) -> int:
        """SSE responses and WebSockets in flight (a statistic for tests and shutdown)."""
        return self.quotas.open_total

    def charge(self, caller: Caller, kind: Kind) -> None:
        """Count a chat or a mint against ``caller``'s token (429 past its rate)."""
        self.quotas.charge(caller.token.sha256, kind)


class _Cors(CORSMiddleware):
    """Starlette's CORS, whose refused preflight (plain text) is answered as JSON."""

    def preflight_response(self, request_headers: Headers) -> Response:
        answer = super().preflight_response(request_headers)
        if answer.status_code < 400:
            return answer
        kept = {
            k: v for k, v in answer.headers.items() if k not in ("content-length", "content-type")
        }
        message = bytes(answer.body).decode("utf-8", "replace").lower()
        return JSONResponse({"error": message}, status_code=answer.status_code, headers=kept)


def front_of(request: Request) -> Front:
    front = request.app.state.front
    assert isinstance(front, Front)
    return front


async def _api_error(request: Request, exc: Exception) -> Response:
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_body(exc.status_code, str(exc.detail).lower())


async def _internal(request: Request, exc: Exception) -> Response:
    log.error("request_failed", path=request.url.path, exc_info=exc)
    return JSONResponse({"error": INTERNAL}, status_code=500)


def build_app(front: Front) -> Starlette:
    from .control import CONTROL_ROUTES
    from .openapi import openapi_route
    from .page import page_routes
    from .routes import ROUTES
    from .tree import TREE_ROUTES
    from .ws import push, upgrade_required

    routes = [
        *ROUTES,
        *CONTROL_ROUTES,
        *TREE_ROUTES,
        *page_routes(),
        openapi_route(),
        WebSocketRoute("/api/web/ws", push),
        Route("/api/web/ws", upgrade_required, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                _Cors,
                allow_origins=["*"],
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=list(EXPOSED_HEADERS),
                expose_headers=["content-type"],
            )
        ],
        exception_handlers={
            ApiError: _api_error,
            HaloError: _api_error,
            HTTPException: _http_error,
            Exception: _internal,
        },
    )
    app.state.front = front
    return app


__all__ = ["ApiError", "Front", "FrontSettings", "build_app", "front_of"]
