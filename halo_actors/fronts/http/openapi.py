"""The OpenAPI 3.1 document of the HTTP front, served at ``/api/openapi.json``.

Written by hand next to the routes it describes; ``docs/openapi.json`` is this
document saved (``python -m halo_actors.fronts.http.openapi > docs/openapi.json``),
and a test checks the saved copy equals what the app serves and that every route
is in it. SSE routes answer ``text/event-stream``; the frame schemas describe the
JSON of each ``data:`` line.
"""

from __future__ import annotations

import json
from typing import Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...core import ids

Schema = dict[str, object]

VERSION: Final = "0.1.0"


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Schema], required: tuple[str, ...] = (), extra: bool = False) -> Schema:
    schema: Schema = {"type": "object", "properties": props, "additionalProperties": extra}
    if required:
        schema["required"] = list(required)
    return schema


_STR: Final[Schema] = {"type": "string"}
_INT: Final[Schema] = {"type": "integer", "minimum": 0}
_NULL_STR: Final[Schema] = {"type": ["string", "null"]}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _error(description: str) -> Schema:
    return {
        "description": description,
        "content": {"application/json": {"schema": _ref("Error")}},
    }


def _json(description: str, schema: Schema) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _sse(description: str) -> Schema:
    """An SSE answer; as OpenAPI 3.1 reads it, ``schema`` describes each event."""
    return {
        "description": description,
        "content": {"text/event-stream": {"schema": _ref("SseEvent")}},
    }


def _param(name: str, where: str, description: str, schema: Schema = _STR) -> Schema:
    return {
        "name": name,
        "in": where,
        "required": False,
        "description": description,
        "schema": schema,
    }


_DIGITS: Final[Schema] = {"type": "string", "pattern": "^[0-9]{0,18}$"}
"""A non-negative integer parameter: up to 18 digits (so it fits a signed 64-bit integer)."""
_EVENT_ID: Final[Schema] = {"type": "string", "pattern": "^$|^[0-9]{1,18}([.][0-9]{1,18})?$"}
"""A frame id to resume after: ``seq``, or ``seq.part`` for a frame inside one record."""
_WORKSPACE: Final[Schema] = {"type": "string", "pattern": "^$|^/"}
"""An absolute path; empty counts as absent (as for every override)."""
_SEGMENT = "[A-Za-z0-9_.-]{1,128}"
_SESSION_ID: Final[Schema] = {
    "type": "string",
    "pattern": f"^$|^{_SEGMENT}(>{_SEGMENT}){{0,{ids.MAX_DEPTH - 1}}}$",
}
"""Safe segments joined by ``>``, or empty (absent). ``.`` and ``..`` are refused too,
which a pattern without look-ahead cannot say."""
WORKSPACE_PARAMS: Final = [
    _param("workspace", "query", "another workspace (full tokens only)", _WORKSPACE),
    _param("x-workspace", "header", "another workspace (full tokens only)", _WORKSPACE),
]
SESSION_PARAMS: Final = [
    _param(
        "sessionId", "query", "an explicit session id (safe id; owned unless full)", _SESSION_ID
    ),
    _param("x-session-id", "header", "an explicit session id", _SESSION_ID),
]
COMMON_ERRORS: Final = {
    "400": _error("bad input: malformed body, unknown field, unsafe id, bad parameter"),
    "401": _error("missing or invalid token"),
    "403": _error("not allowed: read-only token, workspace override, session not owned"),
    "431": _error("request line or headers too large"),
}


LIMITED: Final = {"429": _error("past a per-token limit (open streams, chats or mints a minute)")}


def _op(summary: str, responses: dict[str, Schema], **more: object) -> Schema:
    op: Schema = {"summary": summary, "responses": {**responses, **COMMON_ERRORS}}
    op.update(more)
    return op


def _body(schema_name: str, required: bool) -> Schema:
    return {
        "required": required,
        "content": {"application/json": {"schema": _ref(schema_name)}},
    }


def _schemas() -> dict[str, Schema]:
    return {
        "Error": _obj({"error": _STR}, ("error",)),
        "ChatRequest": _obj(
            {
                "message": _STR,
                "images": {"type": "array", "items": _STR, "maxItems": 16},
                "workspace": _nullable(_WORKSPACE),
                "sessionId": _nullable(_SESSION_ID),
                "agentId": _NULL_STR,
            },
            ("message",),
        ),
        "StopRequest": _obj(
            {"workspace": _nullable(_WORKSPACE), "sessionId": _nullable(_SESSION_ID)}
        ),
        "MintRequest": _obj({"workspace": _nullable(_WORKSPACE), "agentId": _NULL_STR}),
        **_answer_schemas(),
    }


def _answer_schemas() -> dict[str, Schema]:
    return {
        "Minted": _obj({"sessionId": _STR}, ("sessionId",)),
        "Stopped": _obj({"stopped": {"type": "boolean"}}, ("stopped",)),
        "SessionPage": _obj(
            {
                "workspace": _STR,
                "sessions": {"type": "array", "items": _ref("SessionRow")},
                "nextCursor": {"type": ["integer", "null"]},
            },
            ("workspace", "sessions", "nextCursor"),
        ),
        "SessionRow": _obj(
            {"sessionId": _STR, "title": _NULL_STR, "updatedAt": _INT},
            ("sessionId", "title", "updatedAt"),
        ),
        "History": _obj(
            {
                "sessionId": _STR,
                "messages": {"type": "array", "items": _ref("HistoryRow")},
                "running": {"type": "boolean"},
                "nextBefore": {"type": ["integer", "null"]},
            },
            ("sessionId", "messages", "running", "nextBefore"),
        ),
        "HistoryRow": _obj(
            {
                "id": _INT,
                "timestamp": _INT,
                "role": {"enum": ["user", "assistant", "error"]},
                "text": _STR,
                "images": {"type": "array", "items": _STR},
                "contentBlocks": {"type": "array", "items": {"type": "object"}},
                "usage": _obj(
                    {
                        "inputTokens": _INT,
                        "outputTokens": _INT,
                        "cacheReadTokens": _INT,
                        "cacheWriteTokens": _INT,
                    },
                    ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"),
                ),
            },
            ("id", "timestamp", "role", "text"),
        ),
        "SseEvent": _obj(
            {
                "id": {"type": "string", "pattern": "^[0-9]+([.][0-9]+)?$"},
                "event": {"type": "string"},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": _ref("Frame"),
                },
            },
            ("id", "data"),
            extra=True,
        ),
        "Frame": {
            "oneOf": [_ref(name) for name in FRAMES.values()],
            "discriminator": {
                "propertyName": "type",
                "mapping": {kind: f"#/components/schemas/{name}" for kind, name in FRAMES.items()},
            },
        },
        **_frame_schemas(),
    }


FRAMES: Final = {
    "session": "SessionFrame",
    "user": "UserFrame",
    "thinking": "ThinkingFrame",
    "stream": "StreamFrame",
    "tool_call": "ToolCallFrame",
    "tool_result": "ToolResultFrame",
    "switch": "SwitchFrame",
    "file": "FileFrame",
    "queued": "QueuedFrame",
    "complete": "CompleteFrame",
    "error": "ErrorFrame",
}
"""Every frame type an SSE stream carries, and its schema's name."""


def _frame_schemas() -> dict[str, Schema]:
    def frame(kind: str, props: dict[str, Schema] | None = None) -> Schema:
        fields = props or {}
        return _obj({"type": {"const": kind}, **fields}, ("type", *fields))

    return {
        "SessionFrame": frame("session", {"sessionId": _STR}),
        "UserFrame": frame("user", {"text": _STR}),
        "ThinkingFrame": frame("thinking", {"text": _STR}),
        "StreamFrame": frame("stream", {"text": _STR}),
        "ToolCallFrame": frame(
            "tool_call", {"toolName": _STR, "toolUseId": _STR, "toolInput": {"type": "object"}}
        ),
        "ToolResultFrame": frame(
            "tool_result",
            {"toolName": _STR, "toolUseId": _STR, "result": {"type": "string", "maxLength": 500}},
        ),
        "SwitchFrame": frame("switch", {"sessionId": _STR}),
        "FileFrame": frame("file", {"path": _STR, "url": _STR}),
        "QueuedFrame": frame("queued"),
        # a complete that ends a turn says why (end_turn, interrupted, stopped, error, ...)
        "CompleteFrame": _obj({"type": {"const": "complete"}, "reason": _STR}, ("type",)),
        "ErrorFrame": frame("error", {"error": _STR}),
    }


TARGET_PARAMS: Final = [*WORKSPACE_PARAMS, *SESSION_PARAMS]


def _writing_paths() -> dict[str, Schema]:
    target = TARGET_PARAMS
    return {
        "/api/web/chat": {
            "post": _op(
                "Send a message; SSE of the run until its terminal complete (or queued)",
                {
                    "200": _sse("SSE frames (see Frame)"),
                    "404": _error("not found"),
                    "409": _error("session archived or deleted"),
                    "413": _error("body or message too large"),
                    **LIMITED,
                },
                requestBody=_body("ChatRequest", True),
                parameters=target,
            )
        },
        "/api/web/sessions": {
            "post": _op(
                "Mint and create a root session in the token's namespace",
                {
                    "200": _json("the new id", _ref("Minted")),
                    "413": _error("body too large"),
                    **LIMITED,
                },
                requestBody=_body("MintRequest", False),
                parameters=WORKSPACE_PARAMS,
            ),
            "get": _op(
                "One page (50) of the token's own root sessions, newest first",
                {"200": _json("a page", _ref("SessionPage"))},
                parameters=[
                    _param("cursor", "query", "nextCursor of the previous page", _DIGITS),
                    *WORKSPACE_PARAMS,
                ],
            ),
        },
        "/api/web/stop": {
            "post": _op(
                "Stop the addressed session; answers after the turn has stopped",
                {"200": _json("whether anything was stopped", _ref("Stopped"))},
                requestBody=_body("StopRequest", False),
                parameters=target,
            )
        },
    }


def _reading_paths() -> dict[str, Schema]:
    target = TARGET_PARAMS
    return {
        "/api/web/history": {
            "get": _op(
                "One page of the session's history: its newest rows, in log order",
                {"200": _json("history", _ref("History")), "404": _error("session not found")},
                parameters=[
                    _param("since", "query", "epoch ms", _DIGITS),
                    _param("limit", "query", "rows per page: default 200, 1 to 1000", _DIGITS),
                    _param("before", "query", "only rows with id < before (nextBefore)", _DIGITS),
                    *target,
                ],
            )
        },
        "/api/web/subscribe": {
            "get": _op(
                "SSE: reattach to the session (one complete when idle); resumable",
                {
                    "200": _sse("SSE frames (see Frame)"),
                    "404": _error("session not found"),
                    **LIMITED,
                },
                parameters=[
                    _param("lastEventId", "query", "resume after this id", _EVENT_ID),
                    _param("last-event-id", "header", "resume after this id", _EVENT_ID),
                    *target,
                ],
            )
        },
        "/api/web/file": {
            "get": _op(
                "Serve a workspace-relative file inline",
                {
                    "200": {"description": "the file", "content": {"*/*": {}}},
                    "206": {"description": "the ranges asked for", "content": {"*/*": {}}},
                    "404": _error("file not found (or a dangling symlink)"),
                    "416": _error("range not satisfiable (Content-Range: bytes */<size>)"),
                },
                parameters=[
                    {
                        "name": "path",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "string", "minLength": 1},
                    },
                    *WORKSPACE_PARAMS,
                ],
            )
        },
        "/api/web/ws": {
            "get": _op(
                "WebSocket push (upgrade): every client frame with its seq; complete frames "
                "carry batchBoundary",
                {
                    "101": {"description": "switching protocols"},
                    "426": _error("a plain HTTP request: this route needs a WebSocket upgrade"),
                    **LIMITED,
                },
                parameters=[_param("lastEventId", "query", "resume", _EVENT_ID), *target],
            )
        },
        "/api/openapi.json": {
            "get": {
                "summary": "This document",
                "security": [],
                "responses": {"200": _json("OpenAPI 3.1", {"type": "object"})},
            }
        },
    }


def build_document() -> Schema:
    from . import openapi_web

    return {
        "openapi": "3.1.0",
        "info": {"title": "halo_actors HTTP front", "version": VERSION},
        "paths": {**_writing_paths(), **_reading_paths(), **openapi_web.paths()},
        "components": {
            "schemas": {**_schemas(), **openapi_web.schemas()},
            "securitySchemes": {
                "header": {"type": "apiKey", "in": "header", "name": "x-token"},
                "query": {"type": "apiKey", "in": "query", "name": "token"},
            },
        },
        "security": [{"header": []}, {"query": []}],
    }


def render() -> str:
    return json.dumps(build_document(), indent=2, sort_keys=True) + "\n"


async def _serve(request: Request) -> Response:
    return JSONResponse(build_document())


def openapi_route() -> Route:
    return Route("/api/openapi.json", _serve, methods=["GET"])


if __name__ == "__main__":
    print(render(), end="")
