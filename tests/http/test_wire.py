"""The wire: HTTP/1.1 only (``docs/design/http-transport.md``), and every error body is JSON."""

from __future__ import annotations

import base64
import json
import re

import h2.config
import h2.connection
import h2.settings
import httpx
import pytest
import trio
from web_client import Harness, sse

JSON = "application/json"


async def _exchange(harness: Harness, data: bytes) -> bytes:
    """Send raw bytes on a fresh connection; the answer, to its close or its last byte."""
    stream = await trio.open_tcp_stream("127.0.0.1", harness.server.port)
    async with stream:
        await stream.send_all(data)
        answer = bytearray()
        while not _complete(answer) and (chunk := await stream.receive_some(65536)):
            answer += chunk
    return bytes(answer)


def _complete(answer: bytearray) -> bool:
    head, found, body = bytes(answer).partition(b"\r\n\r\n")
    length = re.search(rb"content-length: *(\d+)", head.lower())
    return bool(found and length and len(body) >= int(length[1]))


def _body(answer: bytes) -> object:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return json.loads(body)


def _h2_client() -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})  # never reads
    return conn


async def test_http2_with_prior_knowledge_is_refused_505_before_any_stream_opens(
    harness: Harness,
) -> None:
    """HTTP/2 (prior knowledge) bypassed the slow-reader defence: streams with a zero
    flow-control window stayed open with nothing delivered. Only HTTP/1.1 is served:
    a real h2 client's preface and 50 streams get one 505 and a closed connection."""
    token = harness.token()
    conn = _h2_client()
    for stream_id in range(1, 101, 2):
        headers = [
            (":method", "GET"),
            (":scheme", "http"),
            (":authority", "127.0.0.1"),
            (":path", "/api/web/subscribe?sessionId=web_alice_h2"),
            ("x-token", token),
        ]
        conn.send_headers(stream_id, headers, end_stream=True)
    with trio.fail_after(10):
        answer = await _exchange(harness, conn.data_to_send())
    assert answer.startswith(b"HTTP/1.1 505 "), answer[:200]
    assert _body(answer) == {"error": "only HTTP/1.1 is served"}
    assert harness.server.front.open_streams == 0


async def test_an_h2c_upgrade_is_ignored_and_answered_in_http1(harness: Harness) -> None:
    """HTTP/1.1 only: an ``Upgrade: h2c`` request is answered in HTTP/1.1, never switched."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    upgrade = conn.initiate_upgrade_connection()
    assert upgrade is not None
    settings = base64.urlsafe_b64encode(upgrade).rstrip(b"=")
    head = (
        "GET /api/web/sessions HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings, close\r\n"
        f"Upgrade: h2c\r\nHTTP2-Settings: {settings.decode()}\r\nx-token: {harness.token()}\r\n\r\n"
    )
    with trio.fail_after(10):
        answer = await _exchange(harness, head.encode())
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert b"upgrade: h2c" not in answer.lower()
    page = _body(answer)
    assert isinstance(page, dict) and page["sessions"] == []


@pytest.mark.parametrize("where", ["url", "header"], ids=["huge URL", "huge header"])
async def test_a_request_line_or_headers_too_large_is_a_json_431(
    harness: Harness, where: str
) -> None:
    """Every error body is JSON, including 431 (huge URL/headers)."""
    huge = "a" * 100_000  # past what one read takes: the server holds it incomplete
    url, header = (
        (f"/api/web/history?x={huge}", "") if where == "url" else ("/", f"x-a: {huge}\r\n")
    )
    head = f"GET {url} HTTP/1.1\r\nHost: x\r\nx-token: {harness.token()}\r\n{header}\r\n"
    with trio.fail_after(10):
        answer = await _exchange(harness, head.encode())
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert _body(answer) == {"error": "request line or headers too large"}


async def test_a_malformed_request_and_a_refused_websocket_upgrade_get_json_bodies(
    harness: Harness,
) -> None:
    """Every error body is JSON, also those the HTTP server answers by itself."""
    upgrade = (
        f"GET /api/web/nowhere?token={harness.token()} HTTP/1.1\r\nHost: x\r\n"
        "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    with trio.fail_after(10):
        garbage = await _exchange(harness, b"NOT HTTP AT ALL\r\n\r\n")
        no_route = await _exchange(harness, upgrade.encode())
    assert garbage.startswith(b"HTTP/1.1 400 "), garbage[:200]
    assert _body(garbage) == {"error": "malformed HTTP request"}
    assert no_route.startswith(b"HTTP/1.1 403 "), no_route[:200]
    assert _body(no_route) == {"error": "forbidden"}


async def test_range_errors_and_a_refused_cors_preflight_are_json(harness: Harness) -> None:
    """Every error body is JSON, including 416 and a malformed ``Range``."""
    (harness.workspace / "ten.txt").write_text("0123456789")
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            await sse(client, "POST", "/api/web/chat", json={"message": "hi"})

            async def get(range_: str) -> httpx.Response:
                params = {"path": "ten.txt"}
                return await client.get("/api/web/file", params=params, headers={"range": range_})

            part = await get("bytes=2-4")
            beyond = await get("bytes=100-200")
            malformed = await get("bytes=abc")
            other_unit = await get("lines=1-2")
            preflight = await client.options(
                "/api/web/chat",
                headers={"origin": "http://elsewhere", "access-control-request-method": "PUT"},
            )
    assert part.status_code == 206 and part.text == "234"
    assert beyond.status_code == 416
    assert beyond.headers["content-type"] == JSON
    assert beyond.headers["content-range"] == "bytes */10"
    assert beyond.json() == {"error": "range not satisfiable: the file has 10 bytes"}
    for resp in (malformed, other_unit):
        assert resp.status_code == 400 and resp.headers["content-type"] == JSON
        assert resp.json()["error"].startswith("malformed Range header: ")
    assert preflight.status_code == 400 and preflight.headers["content-type"] == JSON
    assert preflight.json() == {"error": "disallowed cors method"}
