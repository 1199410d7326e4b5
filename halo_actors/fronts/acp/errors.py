"""The adapter's one table: a failed call to the HTTP front → a JSON-RPC error.

| server answer | code | why |
|---|---|---|
| 401 (token refused) | -32000 | ACP's "authentication required" |
| 400, 403, 404, 409 | -32602 | the request named something the server refuses (unknown or foreign session, bad cursor) |
| unreachable, 5xx, anything else | -32603 | internal error; the message says what failed |

Errors the adapter finds itself (a missing ``sessionId``, an empty prompt, a
second prompt in flight) are raised where they are found, with the codes of
``docs/acp.md``. The message always names the operation and the server's own
error text; never a traceback.
"""

from __future__ import annotations

from typing import Final

from .client import ServerError
from .jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RpcError

AUTH_REQUIRED: Final = -32000
"""ACP's code for "authentication required"."""

_BY_STATUS: Final = {
    401: AUTH_REQUIRED,
    400: INVALID_PARAMS,
    403: INVALID_PARAMS,
    404: INVALID_PARAMS,
    409: INVALID_PARAMS,
}


def rpc_error(exc: ServerError, doing: str) -> RpcError:
    """``doing`` names the operation: ``"cannot load session X"``."""
    code = _BY_STATUS.get(exc.status, INTERNAL_ERROR) if exc.status else INTERNAL_ERROR
    return RpcError(code, f"{doing}: {exc}")
