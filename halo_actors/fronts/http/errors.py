"""The HTTP front's one table from errors to statuses, and its JSON error bodies.

Every error answer is ``{"error": "<message>"}`` with a 4xx/5xx status. Messages
come from our own exceptions (which name workspace-relative paths and ids only);
a 500, whatever raised it, is answered ``{"error": "internal error"}`` and logged,
never echoed (a broken agent profile is the caller's 400, naming the file). :class:`ApiError` carries a front-specific status and message (401
bad token, 403 ownership, 400 bad body, …); runtime errors map through
:data:`STATUS_TABLE`, first match wins (subclasses before their bases).
"""

from __future__ import annotations

from typing import Final

from starlette.responses import JSONResponse

from ...core.errors import (
    EventTooLarge,
    FileProblem,
    GateRefused,
    HaloError,
    InvalidInput,
    PathNotAccessible,
    SessionNotFound,
    SessionUnavailable,
    StoreClosed,
    StoreFailed,
    SubscriptionClosed,
    UnsafeSessionId,
)
from ...core.logger import get_logger
from ...tools.files import FileNotFound, PathIsDirectory

log = get_logger("halo_actors.http")


class ApiError(Exception):
    """An answer decided by the front: ``status`` and the ``error`` message."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        """Sent with the answer (``retry-after`` on a 429)."""


STATUS_TABLE: Final[tuple[tuple[type[HaloError], int], ...]] = (
    (UnsafeSessionId, 400),
    (EventTooLarge, 413),
    (InvalidInput, 400),
    (SessionNotFound, 404),
    (SessionUnavailable, 409),
    (PathNotAccessible, 403),
    (FileNotFound, 404),
    (PathIsDirectory, 400),
    (FileProblem, 400),
    (GateRefused, 403),
    (StoreClosed, 503),
    (StoreFailed, 503),
    (SubscriptionClosed, 503),
    (HaloError, 500),
)

# Front messages used in more than one place (tests compare the exact bodies).
BAD_TOKEN: Final = "missing or invalid token"
MISSING_TOKEN: Final = "missing token: send it in the x-token header (or the token query parameter)"
MALFORMED_TOKEN: Final = (
    "malformed token: the x-token header (or token parameter) holds characters a token "
    "never has (a newline, a space, quotes?); send hat_<id>_<secret> alone"
)
NOT_OWNED: Final = "session not owned by this token"
READ_ONLY: Final = "this token is read-only"
SESSION_NOT_FOUND: Final = "session not found"
WORKSPACE_NOT_ALLOWED: Final = "only a full token may choose the workspace"
INTERNAL: Final = "internal error"


def status_of(exc: BaseException) -> int:
    if isinstance(exc, ApiError):
        return exc.status
    for kind, status in STATUS_TABLE:
        if isinstance(exc, kind):
            return status
    return 500


def message_of(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return exc.message
    if status_of(exc) == 500:
        return INTERNAL
    if isinstance(exc, FileNotFound):
        return "file not found"
    if isinstance(exc, HaloError):
        return str(exc) or type(exc).__name__
    return INTERNAL


def error_response(exc: BaseException) -> JSONResponse:
    status = status_of(exc)
    if status == 500:
        log.error("request_failed", error=repr(exc))
    headers = exc.headers if isinstance(exc, ApiError) else None
    return JSONResponse({"error": message_of(exc)}, status_code=status, headers=headers)


def error_body(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
