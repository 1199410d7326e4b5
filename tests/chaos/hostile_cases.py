"""Hand-written hostile inputs for ``test_hostile_http.py``: ids, and two small helpers."""

from __future__ import annotations

from pathlib import Path

import httpx
from web_client import Harness, sse

ROUTES_WITH_IDS = ["chat", "stop", "history", "subscribe"]
UNSAFE_IDS = [
    "..",
    ".",
    "a/b",
    "../web_alice_x",
    "web_alice_x>..",
    "web_alice_x>",
    ">web_alice_x",
    "web_alice_x;drop table events",
    "web_alice_x\x00",
    "web_alice_x%2f..",
    "web_alice_ü",
    "web_alice_" + "x" * 200,
    ">".join(["web_alice_x"] + ["c"] * 40),
    "web_alice_x y",
]


async def address(client: httpx.AsyncClient, route: str, sid: str, where: str) -> httpx.Response:
    """One request to ``route`` addressing ``sid`` in the body, the query or a header."""
    body = {"sessionId": sid} if where == "body" else {}
    params = {"sessionId": sid} if where == "query" else {}
    headers = {"x-session-id": sid} if where == "header" else {}
    if route == "chat":
        return await client.post(
            "/api/web/chat", json={"message": "hi", **body}, params=params, headers=headers
        )
    if route == "stop":
        return await client.post("/api/web/stop", json=body, params=params, headers=headers)
    if where == "body":
        params = {"sessionId": sid}
    return await client.get(f"/api/web/{route}", params=params, headers=headers)


async def still_serves(harness: Harness, token: str) -> None:
    """A fresh session still gets a whole answer."""
    async with harness.client(token) as client:
        minted = (await client.post("/api/web/sessions")).json()["sessionId"]
        body = {"message": "still there?", "sessionId": minted}
        read = await sse(client, "POST", "/api/web/chat", json=body)
    assert read.types()[-1] == "complete", read.types()


def traversal_paths(secret: Path) -> list[str]:
    """``?path=`` values that try to leave the workspace or reach ``.halo/`` (the test
    makes ``link-out``, ``link-dir``, ``link-halo`` and ``dangling`` symlinks)."""
    return [
        "../secret.txt",
        "../../secret.txt",
        "out/../../secret.txt",
        str(secret),
        "/etc/passwd",
        "link-out",
        "link-dir/secret.txt",
        "link-halo/events.db",
        ".halo/events.db",
        ".halo/events.db-wal",
        ".halo/events.db-shm",
        ".halo/events.db-halo-journal",
        "./.halo/events.db",
        "out/../.halo/events.db",
        "dangling",
        "%2e%2e/secret.txt",
        "..%2fsecret.txt",
        "....//secret.txt",
        "out\x00.txt",
        "out/ok.txt/..",
        "~/secret.txt",
        "x" * 5000,
        "out/" * 2000 + "ok.txt",
    ]
