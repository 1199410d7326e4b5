"""Request bodies and query parameters: typed, capped, strict.

Bodies are JSON objects decoded into Structs that forbid unknown fields, so a typo
(``sessionID``) is a 400 rather than a silently ignored override. A body is read
in chunks, kept only up to the cap, and refused with 413 when it passes it, or with
408 when the whole body takes longer than the route's deadline. Decoding errors answer 400 with
msgspec's message (it names the field, never echoes the input at length).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Literal, TypeVar

import msgspec
import trio
from starlette.requests import Request

from .errors import ApiError
from .frames import Resume

T = TypeVar("T")
MAX_IMAGES = 16
DRAIN_LIMIT = 64 << 20
"""Bytes of an oversized body read and dropped before answering 413."""


class _Body(msgspec.Struct, forbid_unknown_fields=True, rename="camel", kw_only=True):
    pass


class ChatBody(_Body):
    message: str
    images: list[str] = msgspec.field(default_factory=list)
    workspace: str | None = None
    session_id: str | None = None
    agent_id: str | None = None


class StopBody(_Body):
    workspace: str | None = None
    session_id: str | None = None


class InterruptBody(_Body):
    mode: Literal["soft", "hard"]
    workspace: str | None = None
    session_id: str | None = None


class MintBody(_Body):
    workspace: str | None = None
    agent_id: str | None = None


async def read_body(request: Request, cap: int, within: float = math.inf) -> bytes:
    """The whole body, or 413 once it passes ``cap``, or 408 unless it all arrives ``within`` s.

    An oversized body is still read (and dropped) up to :data:`DRAIN_LIMIT`, so a
    client that sends it all before reading gets the 413 instead of a broken pipe;
    past that limit the answer goes out at once. The deadline covers the whole body,
    so a client trickling bytes (slow loris) cannot hold a request open for long.
    """
    declared = request.headers.get("content-length", "")
    too_large = ApiError(413, f"request body too large (the limit is {cap} bytes)")
    if declared.isdigit() and int(declared) > DRAIN_LIMIT:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    with trio.move_on_after(within) as deadline:
        async for chunk in request.stream():
            size += len(chunk)
            if size > DRAIN_LIMIT:
                break
            if size <= cap:
                chunks.append(chunk)
    if deadline.cancelled_caught:
        raise ApiError(408, f"request body not received within {within:g} s")
    if size > cap:
        raise too_large
    return b"".join(chunks)


async def parse_body(
    request: Request, kind: type[T], cap: int, *, optional: bool = False, within: float = math.inf
) -> T:
    raw = await read_body(request, cap, within)
    if not raw.strip() and optional:
        raw = b"{}"
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise ApiError(400, f"invalid request body: {exc}") from None
    except msgspec.DecodeError:
        raise ApiError(400, "invalid request body: not a JSON object") from None


def check_chat(body: ChatBody) -> None:
    if not body.message.strip() and not body.images:
        raise ApiError(400, "message is empty")
    if len(body.images) > MAX_IMAGES:
        raise ApiError(400, f"too many images (at most {MAX_IMAGES})")


MAX_DIGITS = 18
"""Longest integer parameter: 18 digits always fit the log's signed 64-bit integers."""


def digits(value: str | None, name: str) -> int | None:
    """A non-negative integer query parameter: 1 to 18 ASCII digits; empty means absent."""
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > MAX_DIGITS:
        raise ApiError(400, f"Invalid {name}")
    return int(value)


def resume_after(
    parse: Callable[[str | None, str], T | None],
    headers: Mapping[str, str],
    query: Mapping[str, str],
) -> T | None:
    """The resume id of a stream: the ``Last-Event-ID`` header's, else the ``lastEventId``
    query's, each read with ``parse`` (``digits`` or ``resume_id``). Both are checked when
    both are given: a malformed one is refused, never shadowed by the other."""
    header = parse(headers.get("last-event-id"), "lastEventId")
    asked = parse(query.get("lastEventId"), "lastEventId")
    return header if header is not None else asked


def resume_id(value: str | None, name: str) -> Resume | None:
    """A frame id to resume after: ``seq`` or ``seq.part`` (each part up to 18 digits)."""
    seq, dot, part = (value or "").partition(".")
    whole = digits(seq, name)
    if whole is None:
        if dot:
            raise ApiError(400, f"Invalid {name}")
        return None
    if not dot:
        return Resume(whole)
    shown = digits(part, name)
    if shown is None or whole == 0:
        raise ApiError(400, f"Invalid {name}")
    return Resume(whole, shown)
