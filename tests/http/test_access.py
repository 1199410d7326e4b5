"""Tokens, access levels, workspace overrides, session ownership and CORS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from web_client import Harness, serve_harness, sse

from halo_actors import cli
from halo_actors.fronts.http import cli as http_cli
from halo_actors.fronts.http.errors import BAD_TOKEN, MALFORMED_TOKEN, MISSING_TOKEN
from halo_actors.fronts.http.tokens import TokenStore, hash_token

ROUTES = [
    ("POST", "/api/web/chat", {"message": "hi"}),
    ("POST", "/api/web/sessions", {}),
    ("GET", "/api/web/sessions", None),
    ("POST", "/api/web/stop", {}),
    ("GET", "/api/web/history", None),
    ("GET", "/api/web/subscribe", None),
    ("GET", "/api/web/file?path=x", None),
]
NOT_OWNED = {"error": "session not owned by this token"}


def test_token_secrets_are_stored_hashed_and_can_be_revoked(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "state")
    token = store.create("alice", "readonly", tmp_path)
    raw = store.path.read_text()
    assert token not in raw and hash_token(token) in raw
    assert oct(store.path.stat().st_mode & 0o777) == "0o600"
    info = store.find(token)
    assert info is not None and info.access == "readonly" and info.account_id == "alice"
    assert store.revoke(info.id) is not None
    assert store.find(token) is None
    with pytest.raises(ValueError, match="account id"):
        store.create("bad_name", "full", tmp_path)


def _cli(argv: list[str]) -> int:
    """The CLI's parsing and dispatch, without ``main``'s global logging setup."""
    return http_cli.run(cli.build_parser().parse_args(argv))


def test_token_cli_creates_lists_and_revokes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    argv = ["token", "create", "--account", "bob", "--access", "full"]
    assert _cli([*argv, "--workspace", str(tmp_path), "--json", "--state", state]) == 0
    created = json.loads(capsys.readouterr().out)
    assert set(created) == {"token", "accountId", "access", "workspace"}
    assert created["accountId"] == "bob" and created["workspace"] == str(tmp_path.resolve())
    assert _cli(["token", "list", "--json", "--state", state]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [t["accountId"] for t in listed] == ["bob"] and "sha256" not in listed[0]
    assert _cli(["token", "revoke", created["token"], "--state", state]) == 0
    assert _cli(["token", "revoke", created["token"], "--state", state]) == 2


async def test_every_route_refuses_a_missing_bad_or_revoked_token(harness: Harness) -> None:
    revoked = harness.token()
    harness.store.revoke(revoked)
    with trio.fail_after(10):
        for token in (None, "nope", revoked, "Bearer " + revoked, f'"{revoked}"'):
            async with harness.client(token) as client:
                for method, url, body in ROUTES:
                    resp = await client.request(method, url, json=body)
                    assert resp.status_code == 401, (method, url)
                    expected = (
                        MISSING_TOKEN
                        if token is None
                        else BAD_TOKEN
                        if token in ("nope", revoked)
                        else MALFORMED_TOKEN
                    )
                    assert resp.json() == {"error": expected}


async def test_the_token_query_parameter_works_like_the_header(harness: Harness) -> None:
    token = harness.token()
    with trio.fail_after(10):
        async with harness.client() as client:
            resp = await client.get(f"/api/web/sessions?token={token}")
    assert resp.status_code == 200


async def test_readonly_tokens_read_but_never_write(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token("readonly")) as client:
            for method, url, body in ROUTES[:2] + ROUTES[3:4]:
                resp = await client.request(method, url, json=body)
                assert resp.status_code == 403, url
                assert resp.json() == {"error": "this token is read-only"}
            assert (await client.get("/api/web/sessions")).status_code == 200
            assert (await client.get("/api/web/history")).status_code == 200
            read = await sse(client, "GET", "/api/web/subscribe")
            assert read.types() == ["session", "complete"]


async def test_only_full_tokens_may_choose_another_workspace(harness: Harness) -> None:
    other = harness.tmp / "other"
    other.mkdir()
    with trio.fail_after(10):
        for access in ("workspace", "readonly"):
            async with harness.client(harness.token(access)) as client:
                for method, url, body in ROUTES:
                    headers = {"x-workspace": str(other)}
                    resp = await client.request(method, url, json=body, headers=headers)
                    assert resp.status_code == 403, (access, url)
                    assert resp.json()["error"] in (
                        "only a full token may choose the workspace",
                        "this token is read-only",  # writing routes refuse readonly first
                    )
                own = await client.get(f"/api/web/sessions?workspace={harness.workspace}")
                assert own.status_code == 200
        async with harness.client(harness.token("full")) as client:
            body = {"message": "hi", "workspace": str(other)}
            read = await sse(client, "POST", "/api/web/chat", json=body)
            assert read.types()[-1] == "complete"
            assert (other / ".halo" / "events.db").exists()
            relative = await client.get("/api/web/sessions?workspace=rel/path")
            assert relative.status_code == 400
            missing = await client.get(f"/api/web/sessions?workspace={other}/missing")
            assert missing.status_code == 400
    assert list(harness.server.front.runtimes.opened()) == [str(other.resolve())]
    assert not (harness.workspace / ".halo").exists()  # reads never scaffold a workspace


async def test_unsafe_session_ids_are_400_on_every_route(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token("full")) as client:
            for bad in ("../etc", "a b", "web_alice_x>..", "x" * 300):
                chat = await client.post("/api/web/chat", json={"message": "hi", "sessionId": bad})
                stop = await client.post("/api/web/stop", json={"sessionId": bad})
                hist = await client.get("/api/web/history", params={"sessionId": bad})
                sub = await client.get("/api/web/subscribe", headers={"x-session-id": bad})
                for resp in (chat, stop, hist, sub):
                    assert resp.status_code == 400, bad
                    assert "invalid sessionId" in resp.json()["error"]


async def test_foreign_sessions_are_403_for_non_full_tokens(harness: Harness) -> None:
    sup = await harness.sup()
    await sup.create_session("web_bob_1")
    with trio.fail_after(10):
        for access in ("workspace", "readonly"):
            async with harness.client(harness.token(access)) as client:
                for sid in ("web_bob_1", "cli_x", "web_alicex_1", "web_bob_1>child_1"):
                    resps = [
                        await client.post(
                            "/api/web/chat", json={"message": "hi", "sessionId": sid}
                        ),
                        await client.post("/api/web/stop", json={"sessionId": sid}),
                        await client.get("/api/web/history", params={"sessionId": sid}),
                        await client.get("/api/web/subscribe", params={"sessionId": sid}),
                    ]
                    for resp in resps:
                        assert resp.status_code == 403, (access, sid)
                        assert resp.json() == NOT_OWNED
        async with harness.client(harness.token("full")) as client:
            hist = await client.get("/api/web/history", params={"sessionId": "web_bob_1"})
            assert hist.status_code == 200


async def test_cors_allows_the_token_header(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client() as client:
            resp = await client.options(
                "/api/web/chat",
                headers={
                    "origin": "https://elsewhere.example",
                    "access-control-request-method": "POST",
                    "access-control-request-headers": "x-token, content-type",
                },
            )
    assert resp.status_code == 200
    assert "x-token" in resp.headers["access-control-allow-headers"].lower()
    assert resp.headers["access-control-allow-origin"] in ("*", "https://elsewhere.example")


async def test_a_damaged_token_file_keeps_the_tokens_already_read(harness: Harness) -> None:
    token = harness.token()
    with trio.fail_after(10):
        async with harness.client(token) as client:
            assert (await client.get("/api/web/sessions")).status_code == 200
            harness.store.path.write_text("{not json")
            assert (await client.get("/api/web/sessions")).status_code == 200
    with pytest.raises(ValueError, match="damaged"):
        harness.store.load()


async def test_concurrent_first_requests_all_see_the_token_file(tmp_path: Path) -> None:
    codes: list[int] = []
    with trio.fail_after(10):
        async with serve_harness(tmp_path, token_reload=1.0) as harness:
            token = harness.token()
            async with harness.client(token) as client, trio.open_nursery() as nursery:

                async def one() -> None:
                    codes.append((await client.get("/api/web/sessions")).status_code)

                for _ in range(20):
                    nursery.start_soon(one)
    assert codes == [200] * 20
