"""Regressions found by the chaos suites (``tests/chaos``): each bug, pinned once."""

from __future__ import annotations

import socket
from functools import partial
from pathlib import Path

import pytest
import trio
from web_client import Harness, serve_harness, sse, subscriber_count, wait_until

from halo_actors.core.events import TextStreamed
from halo_actors.fronts.http.frames import MediaFilter, strip_media

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


async def _raw(harness: Harness, head: str, *, rcvbuf: int | None = None) -> trio.SocketStream:
    sock = trio.socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    await sock.connect(("127.0.0.1", harness.server.port))
    stream = trio.SocketStream(sock)
    await stream.send_all(head.encode())
    return stream


async def _read_to_eof(stream: trio.SocketStream) -> bytes:
    data = bytearray()
    while chunk := await stream.receive_some(65536):
        data += chunk
    return bytes(data)


async def test_a_body_trickled_past_the_deadline_is_408_and_the_connection_closes(
    tmp_path: Path,
) -> None:
    async with serve_harness(tmp_path, body_timeout=0.5) as harness:
        token = harness.token()
        head = (
            "POST /api/web/chat HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            f"x-token: {token}\r\ncontent-length: 100\r\n\r\n"
        )
        with trio.fail_after(10):
            stream = await _raw(harness, head)
            async with stream:
                await stream.send_all(b'{"mess')  # and then nothing more
                answer = await _read_to_eof(stream)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b'"request body not received within 0.5 s"' in answer


async def test_a_client_that_stops_reading_is_dropped_and_shutdown_does_not_wait(
    tmp_path: Path,
) -> None:
    """Hypercorn's socket writes are shielded: only TCP_USER_TIMEOUT ends them."""
    sid = "web_alice_slowreader"
    stuck: trio.SocketStream | None = None
    with trio.fail_after(30):
        async with serve_harness(tmp_path, subscriber_buffer=64, send_timeout=1.0) as harness:
            token = harness.token()
            async with harness.client(token) as client, trio.open_nursery() as nursery:
                body = {"message": "slow 1000", "sessionId": sid}
                nursery.start_soon(partial(sse, client, "POST", "/api/web/chat", json=body))
                sup = await harness.sup()
                await wait_until(lambda: sup.exists(sid) and sup.state(sid).turn_open)
                head = f"GET /api/web/subscribe?sessionId={sid} HTTP/1.1\r\nHost: x\r\n"
                stuck = await _raw(harness, head + f"x-token: {token}\r\n\r\n", rcvbuf=4096)
                front = harness.server.front
                await wait_until(lambda: front.open_streams == 2)
                for _ in range(200):  # 20 MB the reader never takes
                    await sup.log.append(sid, TextStreamed(text="y" * 100_000))
                await wait_until(lambda: front.open_streams == 1)  # the reader was dropped
                assert subscriber_count(sup) == 1  # only the chat's listener is left
                nursery.cancel_scope.cancel()
        # The server shut down with the reader still connected.
    assert stuck is not None
    await stuck.aclose()


@pytest.mark.parametrize(
    "body",
    [
        b'{"message": "hi", "sessionId": "web_alice_x", "agentId": "nobody"}',
        b'{"message": "' + b"m" * (1 << 20) + b'"}',
    ],
    ids=["refused by the runtime", "event over the cap"],
)
async def test_a_stream_refused_before_its_first_byte_still_closes_the_connection(
    harness: Harness, body: bytes
) -> None:
    """The error answer used to be sent inside the disconnect race, which cancelled
    hypercorn's own connection close: the socket stayed open until the client left."""
    head = (
        "POST /api/web/chat HTTP/1.1\r\nHost: x\r\nconnection: close\r\n"
        f"x-token: {harness.token()}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    with trio.fail_after(5):
        stream = await _raw(harness, head)
        async with stream:
            await stream.send_all(body)
            answer = await _read_to_eof(stream)
    assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 413")), answer[:100]


@pytest.mark.parametrize(
    "deltas",
    [
        ["see ", "MEDIA: out/x.png\n"],
        ["see M", "EDIA: out/x.png\n"],
        ["a\nsee ", "MEDIA: out/x.png", "\nMEDIA: out/y.png\n"],
    ],
)
def test_media_mid_line_is_text_however_the_line_is_split(deltas: list[str]) -> None:
    """``MEDIA:`` after other text on the same line is not a MEDIA line; the stream
    used to turn it into a file frame when the text before it came in an earlier delta."""
    media = MediaFilter()
    parts = [p for delta in deltas for p in media.feed(delta)] + media.flush()
    whole = "".join(deltas)
    assert "".join(s for kind, s in parts if kind == "text") == strip_media(whole)
    files = [s for kind, s in parts if kind == "file"]
    assert files == (["out/y.png"] if "out/y.png" in whole else [])


async def test_a_resume_right_after_a_complete_gets_the_next_run_not_a_second_complete(
    harness: Harness,
) -> None:
    """Found by the load suite: the run's ``agent_done`` (logged right after its terminal
    ``complete``) showed as a second ``complete`` to a client resuming from that
    ``complete``, which then took itself to be caught up and missed the next runs."""
    sid = "web_alice_resumer"
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            chat = partial(sse, client, "POST", "/api/web/chat")
            first = await chat(json={"message": "hi", "sessionId": sid})
            second = await chat(json={"message": "hello again", "sessionId": sid})
            params = {"sessionId": sid}
            after_first = first.frames[-1].id
            resumed = await sse(
                client,
                "GET",
                "/api/web/subscribe",
                params=params,
                headers={"last-event-id": str(after_first)},
            )
            caught_up = await sse(
                client,
                "GET",
                "/api/web/subscribe",
                params=params,
                headers={"last-event-id": str(second.frames[-1].id)},
            )
    assert [f.data for f in resumed.frames[1:]] == [f.data for f in second.frames[1:]]
    assert [f.id for f in resumed.frames[1:]] == [f.id for f in second.frames[1:]]
    assert caught_up.types() == ["session", "complete"]


SHADOWED = [
    # (route, params, headers, error): a valid value in one place, a bad one in the other
    (
        "/api/web/subscribe",
        {"lastEventId": "1.x"},
        {"last-event-id": "1"},
        "Invalid lastEventId",
    ),
    ("/api/web/tree", {"lastEventId": "x"}, {"last-event-id": "1"}, "Invalid lastEventId"),
    ("/api/web/history", {"workspace": "{ws}"}, {"x-workspace": "rel/path"}, "absolute path"),
    ("/api/web/subscribe", {"sessionId": "{sid}"}, {"x-session-id": "../etc"}, "invalid sessionId"),
]


@pytest.mark.parametrize(("route", "params", "headers", "error"), SHADOWED)
async def test_a_bad_value_is_refused_even_where_a_good_one_takes_precedence(
    harness: Harness, route: str, params: dict[str, str], headers: dict[str, str], error: str
) -> None:
    """Found by the hostile HTTP suite (seed 4000): a ``Last-Event-ID`` header made the
    ``lastEventId`` query unread, so a malformed one was accepted. Every value given is
    checked now, the one used and the ones it overrides."""
    with trio.fail_after(10):
        async with harness.client(harness.token("full")) as client:
            chat = await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
            fill = {"{ws}": str(harness.workspace), "{sid}": str(chat.frames[0].data["sessionId"])}
            query = {name: fill.get(value, value) for name, value in params.items()}
            query.setdefault("sessionId", fill["{sid}"])
            resp = await client.get(route, params=query, headers=headers)
    assert resp.status_code == 400, (route, resp.status_code, resp.text)
    assert error in resp.json()["error"]
