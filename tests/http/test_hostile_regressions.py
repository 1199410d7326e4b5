"""Regressions found by the chaos suites (``tests/chaos``): each bug, pinned once."""

from __future__ import annotations

import pytest
import trio
from web_client import Harness, sse

HUGE_IDS = ["9999999999999999999", "9223372036854775808", "0" * 19]


@pytest.mark.parametrize("value", HUGE_IDS)
async def test_a_resume_id_past_64_bits_is_400_not_a_server_error(
    harness: Harness, value: str
) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
            by_query = await client.get("/api/web/subscribe", params={"lastEventId": value})
            by_header = await client.get("/api/web/subscribe", headers={"last-event-id": value})
            history = await client.get("/api/web/history", params={"since": value})
            page = await client.get("/api/web/sessions", params={"cursor": value})
    for resp, name in [
        (by_query, "lastEventId"),
        (by_header, "lastEventId"),
        (history, "since"),
        (page, "cursor"),
    ]:
        assert resp.status_code == 400, (name, resp.status_code, resp.text)
        assert resp.json() == {"error": f"Invalid {name}"}


async def test_an_18_digit_resume_id_replays_nothing_and_answers_idle(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
            read = await sse(
                client, "GET", "/api/web/subscribe", headers={"last-event-id": "9" * 18}
            )
    assert read.types() == ["session", "complete"]


async def test_a_plain_get_of_the_websocket_route_is_a_documented_426(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            resp = await client.get("/api/web/ws")
            doc = (await client.get("/api/openapi.json")).json()
    assert resp.status_code == 426
    assert resp.json() == {"error": "this route needs a WebSocket upgrade"}
    assert resp.headers["upgrade"] == "websocket"
    assert "426" in doc["paths"]["/api/web/ws"]["get"]["responses"]
