"""One streaming POST to a model API, shared by the providers: status and transport
failures classified, the SSE body parsed, the key kept out of every message.

:class:`Endpoint` is where requests go and how they are signed; :class:`HttpSession`
owns one ``httpx.AsyncClient`` (made on first use inside the running trio loop,
remade if a later loop uses the provider); :func:`sse_events` makes one attempt.

Classification (``docs/design/models.md``), for every provider alike:

    401, 403                   ModelFailed naming the key variable (no retry)
    408, 409, 429, 5xx, 529    Transient (retry-after honoured)
    413, 400/422 "too long"    ModelContextExceeded (compact, retry once)
    400, 422                   ModelRejected (repair, retry once)
    any other status           ModelFailed
    connect/read error, a read silent for ``stall`` seconds: Transient

Invariants: leaving :func:`sse_events` (done, failed or cancelled) closes the
response, and a response not read to its end closes its connection at once;
an error text never holds the API key (:func:`redact`).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import httpx
import trio

from ..model import ModelContextExceeded, ModelFailed, ModelRejected
from .retry import RetryPolicy, Transient, parse_retry_after
from .sse import SseEvent, SseParser

ERROR_BODY_CAP = 4096
"""Bytes of an error response read (its message goes into the error)."""

MESSAGE_CAP = 300
"""Characters of a server's error message kept in ours."""

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})

_TOO_LONG = re.compile(
    r"prompt is too long|context[_ ]length|context window|maximum context|too many tokens"
    r"|reduce the length|input is too long|exceeds the context",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Endpoint:
    provider: str
    """For messages: ``anthropic`` or ``openai``."""
    url: str
    headers: dict[str, str]
    key_env: str
    """The variable the key comes from (named in a 401/403 error)."""
    key: str = ""

    def __repr__(self) -> str:  # never show the headers: they hold the key
        return f"Endpoint({self.provider!r}, {self.url!r})"


def redact(text: str, key: str) -> str:
    return text.replace(key, "[redacted]") if key else text


class HttpSession:
    """One connection pool per provider object, bound to the trio run that made it."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._client: httpx.AsyncClient | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    def client(self) -> httpx.AsyncClient:
        token = trio.lowlevel.current_trio_token()
        if self._client is None or self._token is not token:
            timeout = httpx.Timeout(
                connect=self._policy.connect, read=self._policy.stall, write=30.0, pool=30.0
            )
            self._client = httpx.AsyncClient(timeout=timeout, trust_env=False)
            self._token = token
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._token is trio.lowlevel.current_trio_token():
            await client.aclose()


async def sse_events(
    session: HttpSession, endpoint: Endpoint, body: bytes
) -> AsyncGenerator[list[SseEvent], None]:
    """One attempt: POST ``body`` and yield the response's events as they arrive, one
    list per network read (never empty)."""
    try:
        async with session.client().stream(
            "POST", endpoint.url, content=body, headers=endpoint.headers
        ) as response:
            if response.status_code != 200:
                raise await _status_error(endpoint, response)
            parser = SseParser()
            async for chunk in response.aiter_raw():
                events = parser.feed(chunk)
                if events:
                    yield events
    except httpx.TimeoutException as exc:
        raise Transient(f"timed out ({type(exc).__name__}: no data in time)") from None
    except httpx.TransportError as exc:
        reason = f"connection failed: {type(exc).__name__}: {exc}"
        raise Transient(redact(reason, endpoint.key)) from None


async def _status_error(endpoint: Endpoint, response: httpx.Response) -> Exception:
    raw = b""
    async for chunk in response.aiter_raw():
        raw += chunk
        if len(raw) >= ERROR_BODY_CAP:
            break
    status = response.status_code
    message = redact(error_message(raw[:ERROR_BODY_CAP]), endpoint.key)
    where = f"{endpoint.provider} API {status}"
    if status in (401, 403):
        return ModelFailed(
            f"{where}: the API refused the key; check {endpoint.key_env} ({message})"
        )
    if status in RETRY_STATUSES:
        return Transient(f"{where}: {message}", parse_retry_after(dict(response.headers)))
    if status == 413 or (status in (400, 422) and _TOO_LONG.search(message)):
        return ModelContextExceeded(f"{where}: {message}")
    if status in (400, 422):
        return ModelRejected(f"{where}: {message}")
    return ModelFailed(f"{where}: {message}")


def error_message(raw: bytes) -> str:
    """The message of an error body (both APIs nest it as ``{"error": {"message": …}}``)."""
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        return _clip(text.strip() or "(empty body)")
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        kind, message = error.get("type") or error.get("code"), error.get("message")
        if isinstance(message, str):
            return _clip(f"{kind}: {message}" if isinstance(kind, str) else message)
    if isinstance(error, str):
        return _clip(error)
    return _clip(text.strip())


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_CAP else text[:MESSAGE_CAP] + "…"


def stream_error(endpoint: Endpoint, payload: object) -> Exception:
    """An ``error`` event inside a 200 stream, classified like a status would be."""
    message = redact(error_message(json.dumps(payload).encode()), endpoint.key)
    lowered = message.lower()
    where = f"{endpoint.provider} API stream error"
    if _TOO_LONG.search(message):
        return ModelContextExceeded(f"{where}: {message}")
    if "invalid_request" in lowered:
        return ModelRejected(f"{where}: {message}")
    if "authentication" in lowered or "permission" in lowered:
        return ModelFailed(f"{where}: check {endpoint.key_env} ({message})")
    return Transient(f"{where}: {message}")
