"""A token header a newline cut in two: the HTTP parser refuses the request before the
app sees it, and the answer still says what to fix (401, JSON)."""

from __future__ import annotations

import json

import trio
from web_client import Harness

from halo_actors.fronts.http.errors import MALFORMED_TOKEN
from halo_actors.fronts.http.http1 import token_header_split


async def raw_request(harness: Harness, head: bytes) -> tuple[int, dict[str, object]]:
    host, port = harness.url.removeprefix("http://").rsplit(":", 1)
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(head)
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    body = rest.partition(b"\r\n\r\n")[2]
    return int(status_line.split()[1]), json.loads(body)


async def test_a_token_header_cut_by_a_newline_gets_a_json_401_that_says_so(
    harness: Harness,
) -> None:
    """Rule: a header with a newline gets a JSON 401 that says so (as curl sends
    `-H "x-token: $TOKEN"` when TOKEN holds two lines)."""
    token = harness.token()
    head = (
        b"GET /api/web/sessions HTTP/1.1\r\nHost: x\r\nUser-Agent: curl/7.88.1\r\n"
        b"x-token: " + token.encode() + b"\nid 1a2b3c4d \xc2\xb7 account alice\r\n\r\n"
    )
    assert await raw_request(harness, head) == (401, {"error": MALFORMED_TOKEN})


async def test_other_malformed_requests_stay_a_json_400(harness: Harness) -> None:
    head = b"GET /api/web/sessions HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n"
    assert await raw_request(harness, head) == (400, {"error": "malformed HTTP request"})


def test_only_a_split_token_header_counts() -> None:
    assert token_header_split(b"GET / HTTP/1.1\r\nx-token: a\nb c\r\n")
    assert token_header_split(b"GET / HTTP/1.1\r\nX-Token: a\nsecond line")
    assert not token_header_split(b"GET / HTTP/1.1\r\nx-token: a\r\nb c\r\n")
    assert not token_header_split(b"GET / HTTP/1.1\nx-token: a\nhost: x\n")  # bare LFs
    assert not token_header_split(b"GET / HTTP/1.1\r\nx-token: a\n")
