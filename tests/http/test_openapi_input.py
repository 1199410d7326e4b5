"""The OpenAPI document, and bad input answered with a 4xx JSON error (never a 500)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from starlette.routing import Route, WebSocketRoute
from web_client import Harness

from halo_actors.fronts.http.app import build_app

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


async def test_the_saved_document_is_what_the_app_serves(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client() as client:
            served = (await client.get("/api/openapi.json")).json()
    assert json.loads(DOC.read_text()) == served


async def test_every_route_is_documented(harness: Harness) -> None:
    documented = json.loads(DOC.read_text())["paths"]
    app = build_app(harness.server.front)
    for route in app.routes:
        assert isinstance(route, Route | WebSocketRoute)
        assert route.path in documented, route.path
        methods = route.methods if isinstance(route, Route) and route.methods else {"GET"}
        for method in methods - {"HEAD"}:
            assert method.lower() in documented[route.path], (method, route.path)


def test_the_document_validates_as_openapi_3_1() -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(json.loads(DOC.read_text()))


BAD_BODIES: list[tuple[str, bytes | str]] = [
    ("malformed json", b'{"message": "hi"'),
    ("not an object", b'["hi"]'),
    ("wrong type", b'{"message": 42}'),
    ("null message", b'{"message": null}'),
    ("unknown field", b'{"message": "hi", "sessionID": "x"}'),
    ("broken utf-8", b'{"message": "\xff\xfe"}'),
    ("empty message", b'{"message": "   "}'),
    ("images not strings", b'{"message": "hi", "images": [1]}'),
    ("too many images", json.dumps({"message": "hi", "images": ["x"] * 17})),
    ("empty body", b""),
]


@pytest.mark.parametrize(("case", "body"), BAD_BODIES, ids=[c for c, _ in BAD_BODIES])
async def test_bad_chat_bodies_are_400_json(harness: Harness, case: str, body: bytes) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            resp = await client.post("/api/web/chat", content=body)
    assert resp.status_code == 400, case
    assert resp.headers["content-type"] == "application/json"
    assert set(resp.json()) == {"error"} and "Traceback" not in resp.text


async def test_bad_stop_and_mint_bodies_are_400(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            stop = await client.post("/api/web/stop", content=b'{"sessionId": 5}')
            mint = await client.post("/api/web/sessions", content=b'{"nope": 1}')
    assert stop.status_code == 400 and mint.status_code == 400


async def test_huge_bodies_are_413_declared_or_streamed(harness: Harness) -> None:
    huge = b'{"message": "' + b"x" * (5 << 20) + b'"}'

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(huge), 1 << 16):
            yield huge[i : i + (1 << 16)]

    with trio.fail_after(20):
        async with harness.client(harness.token()) as client:
            declared = await client.post("/api/web/chat", content=huge)
            streamed = await client.post("/api/web/chat", content=chunks())  # chunked, no length
    for resp in (declared, streamed):
        assert resp.status_code == 413
        assert "too large" in resp.json()["error"]


async def test_a_message_over_the_event_cap_is_413_not_500(harness: Harness) -> None:
    body = {"message": "y" * (2 << 20)}
    with trio.fail_after(20):
        async with harness.client(harness.token()) as client:
            resp = await client.post("/api/web/chat", json=body)
    assert resp.status_code == 413 and set(resp.json()) == {"error"}


async def test_unknown_routes_and_methods_answer_json(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            missing = await client.get("/api/web/nothing")
            wrong = await client.delete("/api/web/chat")
    assert missing.status_code == 404 and set(missing.json()) == {"error"}
    assert wrong.status_code == 405 and set(wrong.json()) == {"error"}
