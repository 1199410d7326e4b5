"""The OpenAPI part for the routes a person's tools use: the tree stream and the controls.

``openapi.build_document`` merges :func:`paths` and :func:`schemas` into the one
document (``docs/openapi.json``). The page at ``/`` and its static files are not
API routes; they are listed only so that every route of the app is documented.
"""

from __future__ import annotations

from typing import Final

from .openapi import (
    _DIGITS,
    _INT,
    _SESSION_ID,
    _STR,
    _WORKSPACE,
    SESSION_PARAMS,
    TARGET_PARAMS,
    WORKSPACE_PARAMS,
    Schema,
    _body,
    _error,
    _json,
    _nullable,
    _obj,
    _op,
    _param,
    _ref,
)

_BOOL: Final[Schema] = {"type": "boolean"}


def schemas() -> dict[str, Schema]:
    return {
        "InterruptRequest": _obj(
            {
                "mode": {"enum": ["soft", "hard"]},
                "workspace": _nullable(_WORKSPACE),
                "sessionId": _nullable(_SESSION_ID),
            },
            ("mode",),
        ),
        "Interrupted": _obj({"interrupted": _BOOL}, ("interrupted",)),
        "Archived": _obj({"archived": _BOOL}, ("archived",)),
        "TreeSseEvent": _obj(
            {
                "id": {"type": "string", "pattern": "^[0-9]+$"},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": {"oneOf": [_ref("TreeOpening"), _ref("TreeRecord")]},
                },
            },
            ("id", "data"),
            extra=True,
        ),
        "TreeOpening": _obj(
            {"type": {"const": "tree"}, "sessionId": _STR, "cursor": _INT},
            ("type", "sessionId", "cursor"),
        ),
        "TreeRecord": _obj(
            {
                "seq": _INT,
                "sessionId": _STR,
                "ts": _INT,
                "event": {
                    "type": "object",
                    "properties": {"type": _STR},
                    "required": ["type"],
                    "additionalProperties": True,
                },
            },
            ("seq", "sessionId", "ts", "event"),
        ),
    }


def _html(description: str, media: str = "text/html") -> Schema:
    return {"description": description, "content": {media: {"schema": _STR}}}


def _static() -> Schema:
    return {
        "get": {
            "summary": "A static file of the web page (no token)",
            "security": [],
            "parameters": [
                {"name": "name", "in": "path", "required": True, "schema": _STR},
            ],
            "responses": {
                "200": {"description": "the file", "content": {"*/*": {}}},
                "404": _error("no such file"),
            },
        }
    }


def paths() -> dict[str, Schema]:
    return {
        "/api/web/interrupt": {
            "post": _op(
                "A person's interrupt, no message: soft (next batch boundary) or hard (now)",
                {"200": _json("whether a running turn was interrupted", _ref("Interrupted"))},
                requestBody=_body("InterruptRequest", True),
                parameters=TARGET_PARAMS,
            )
        },
        "/api/web/archive": {
            "post": _op(
                "Archive the addressed session's subtree (mailboxes discarded, hidden from lists)",
                {"200": _json("whether anything was archived", _ref("Archived"))},
                requestBody=_body("StopRequest", False),
                parameters=TARGET_PARAMS,
            )
        },
        "/api/web/tree": {
            "get": _op(
                "SSE (or WebSocket upgrade): every record of the session's whole tree; resumable. "
                "sessionId is required (400 without)",
                {
                    "200": {
                        "description": "SSE: the opening frame, then every record of the tree",
                        "content": {"text/event-stream": {"schema": _ref("TreeSseEvent")}},
                    },
                    "404": _error("no such tree"),
                },
                parameters=[
                    _param("lastEventId", "query", "resume after this seq", _DIGITS),
                    _param("last-event-id", "header", "resume after this seq", _DIGITS),
                    *SESSION_PARAMS,
                    *WORKSPACE_PARAMS,
                ],
            )
        },
        "/": {
            "get": {
                "summary": "The web page (static; the token is pasted into it)",
                "security": [],
                "responses": {"200": _html("the page")},
            }
        },
        "/web/{name}": _static(),
    }
