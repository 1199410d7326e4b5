"""The adapter's side of the HTTP front: routes of ``docs/http.md`` and an SSE reader.

Every request carries the adapter's token and content type; extra headers from
``--header`` never override those two. SSE frames are parsed line by line
(``id:``, ``data:``, comments skipped) into :class:`Frame` s; a frame whose data
is not a JSON object is skipped. Every failure (unreachable, an error status, a
stream cut mid-body, a body that is not JSON) surfaces as :class:`ServerError`.

A stream silent for :data:`STREAM_SILENCE` seconds (four missed 15 s
keepalives) counts as dropped, so a dead connection is noticed and re-attached.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass

import httpx
import msgspec
import trio

PROTECTED_HEADERS = frozenset({"x-token", "content-type"})
REQUEST_TIMEOUT = 30.0
STREAM_SILENCE = 60.0
"""Seconds without a byte (keepalives included) after which a stream counts as dropped."""
Query = dict[str, str]
Body = dict[str, object]


class ServerError(Exception):
    """The server answered with an error status (or could not be reached)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Frame:
    data: dict[str, object]
    event_id: str | None = None

    @property
    def type(self) -> object:
        return self.data.get("type")


def parse_header(spec: str) -> tuple[str, str]:
    """``Name: value`` split on the FIRST colon only."""
    name, sep, value = spec.partition(":")
    if not sep or not name.strip():
        raise ValueError(f"--header needs 'Name: value', got {spec!r}")
    return name.strip(), value.strip()


class HaloClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        workspace: str | None = None,
        extra_headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        headers = [(k, v) for k, v in extra_headers if k.lower() not in PROTECTED_HEADERS]
        headers += [("x-token", token), ("content-type", "application/json")]
        self.workspace = workspace
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=REQUEST_TIMEOUT)

    async def aclose(self) -> None:
        await self._http.aclose()

    def _query(self, **params: str) -> Query:
        return {**params, "workspace": self.workspace} if self.workspace else params

    def _body(self, **fields: object) -> Body:
        return {**fields, "workspace": self.workspace} if self.workspace else fields

    async def _json(
        self, method: str, path: str, *, params: Query | None = None, body: Body | None = None
    ) -> dict[str, object]:
        try:
            response = await self._http.request(method, path, params=params, json=body)
        except httpx.HTTPError as exc:
            raise ServerError(f"cannot reach the server: {_describe(exc)}") from None
        if response.status_code >= 400:
            raise ServerError(_error_text(response), response.status_code)
        try:
            decoded = msgspec.json.decode(response.content)
        except msgspec.DecodeError:
            raise ServerError(f"{method} {path}: the answer is not JSON") from None
        return decoded if isinstance(decoded, dict) else {}

    async def new_session(self) -> str:
        answer = await self._json("POST", "/api/web/sessions", body=self._body())
        session_id = answer.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            raise ServerError("the server minted no session id")
        return session_id

    async def list_sessions(self, cursor: str | None) -> dict[str, object]:
        query = self._query(cursor=cursor) if cursor else self._query()
        return await self._json("GET", "/api/web/sessions", params=query)

    async def history(
        self, session_id: str, since: int | None = None, before: int | None = None
    ) -> dict[str, object]:
        """One page of history: the newest rows (before ``before``); ``nextBefore`` pages on."""
        query = self._query(sessionId=session_id)
        if since is not None:
            query["since"] = str(max(since, 0))
        if before is not None:
            query["before"] = str(before)
        return await self._json("GET", "/api/web/history", params=query)

    async def whole_history(self, session_id: str) -> list[object]:
        """Every row of the session's history, oldest first, fetched page by page."""
        rows: list[object] = []
        before: int | None = None
        while True:
            body = await self.history(session_id, before=before)
            page = body.get("messages")
            rows[:0] = page if isinstance(page, list) else []
            after = body.get("nextBefore")
            if not isinstance(after, int) or (before is not None and after >= before):
                return rows
            before = after

    async def stop(self, session_id: str) -> None:
        await self._json("POST", "/api/web/stop", body=self._body(sessionId=session_id))

    @asynccontextmanager
    async def chat(
        self, session_id: str, message: str, images: list[str]
    ) -> AsyncIterator[AsyncIterator[Frame]]:
        body = self._body(sessionId=session_id, message=message)
        if images:
            body["images"] = images
        async with self._stream("POST", "/api/web/chat", body=body) as frames:
            yield frames

    @asynccontextmanager
    async def subscribe(
        self, session_id: str, last_event_id: str | None
    ) -> AsyncIterator[AsyncIterator[Frame]]:
        """Re-attach; ``last_event_id`` asks for exactly the frames after that one."""
        headers = {"last-event-id": last_event_id} if last_event_id else {}
        query = self._query(sessionId=session_id)
        async with self._stream(
            "GET", "/api/web/subscribe", params=query, headers=headers
        ) as frames:
            yield frames

    @asynccontextmanager
    async def _stream(
        self,
        method: str,
        path: str,
        *,
        params: Query | None = None,
        body: Body | None = None,
        headers: dict[str, str] | None = None,
    ) -> AsyncIterator[AsyncIterator[Frame]]:
        timeout = httpx.Timeout(REQUEST_TIMEOUT, read=STREAM_SILENCE)
        request = self._http.build_request(
            method, path, params=params, json=body, headers=headers, timeout=timeout
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise ServerError(f"cannot reach the server: {_describe(exc)}") from None
        try:
            if response.status_code >= 400:
                await response.aread()
                raise ServerError(_error_text(response), response.status_code)
            async with aclosing(_frames(response)) as frames:
                yield frames
        except httpx.HTTPError as exc:
            raise ServerError(f"stream dropped: {_describe(exc)}") from None
        finally:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 1):
                await response.aclose()


def _describe(exc: httpx.HTTPError) -> str:
    return str(exc) or type(exc).__name__


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            return f"{response.status_code}: {body['error']}"
    except ValueError:
        pass
    return f"HTTP {response.status_code}"


async def _frames(response: httpx.Response) -> AsyncGenerator[Frame, None]:
    event_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                frame = _decode_frame("\n".join(data), event_id)
                if frame is not None:
                    yield frame
            data, event_id = [], None
        elif line.startswith(":"):
            continue
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line.startswith("id:"):
            event_id = line[3:].strip()


def _decode_frame(payload: str, event_id: str | None) -> Frame | None:
    try:
        data = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return None
    return Frame(data, event_id) if isinstance(data, dict) else None
