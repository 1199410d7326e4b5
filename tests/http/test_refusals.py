"""Requests the server refuses with a clear 4xx instead of a 500 or a silent mess."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from web_client import Harness, serve_harness, sse

from halo_actors.core.errors import HaloError, StoreFailed
from halo_actors.fronts.http.errors import error_response

BROKEN_TOML = 'system = "unterminated\n'
GOOD_TOML = 'description = "a helper"\n'


async def test_a_chat_to_a_child_id_whose_parent_does_not_exist_is_refused(
    harness: Harness,
) -> None:
    """A chat to a child-shaped id whose parent does not exist (``web_alice_orphan>kid``)
    is refused (4xx): it would create an orphan no tree operation reaches."""
    orphan = "web_alice_orphan>kid"
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            resp = await client.post("/api/web/chat", json={"message": "hi", "sessionId": orphan})
            history = await client.get("/api/web/history", params={"sessionId": orphan})
            await sse(
                client, "POST", "/api/web/chat", json={"message": "hi", "sessionId": "web_alice_p"}
            )
            child = await sse(
                client,
                "POST",
                "/api/web/chat",
                json={"message": "hi", "sessionId": "web_alice_p>kid"},
            )
    assert resp.status_code == 400, resp.text
    assert resp.json() == {
        "error": "cannot create web_alice_orphan>kid: its parent web_alice_orphan does not exist"
    }
    assert history.status_code == 404  # nothing was created
    assert child.types()[-1] == "complete"  # under an existing parent it works


def _profiles(workspace: Path, **files: str) -> None:
    folder = workspace / ".halo" / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.toml").write_text(text)


async def test_a_broken_profile_fails_only_its_own_sessions_with_a_clear_400(
    tmp_path: Path,
) -> None:
    """One broken profile file fails only sessions of that profile with a clear 4xx
    (it used to turn every chat and history of the workspace into 500s)."""
    _profiles(tmp_path / "ws", broken=BROKEN_TOML, helper=GOOD_TOML)
    with trio.fail_after(15):
        async with serve_harness(tmp_path) as harness, harness.client(harness.token()) as client:
            fine = await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
            helper = await sse(
                client,
                "POST",
                "/api/web/chat",
                json={"message": "hi", "agentId": "helper", "sessionId": "web_alice_h"},
            )
            refused = await client.post(
                "/api/web/chat",
                json={"message": "hi", "agentId": "broken", "sessionId": "web_alice_b"},
            )
            history = await client.get("/api/web/history")
    assert fine.types()[-1] == "complete" and helper.types()[-1] == "complete"
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error.startswith("agent profile 'broken' is broken: broken.toml: broken TOML")
    assert history.status_code == 200 and history.json()["messages"]


async def test_a_session_whose_profile_broke_since_is_refused_and_its_history_still_reads(
    tmp_path: Path,
) -> None:
    """A broken profile fails only sessions of that profile, also sessions that existed
    before the file broke: a message to one is a clear 400, its history still reads."""
    workspace = tmp_path / "ws"
    _profiles(workspace, helper=GOOD_TOML)
    body = {"message": "hi", "agentId": "helper", "sessionId": "web_alice_h"}
    with trio.fail_after(20):
        async with serve_harness(tmp_path) as harness, harness.client(harness.token()) as client:
            await sse(client, "POST", "/api/web/chat", json=body)
        _profiles(workspace, helper=BROKEN_TOML)
        async with serve_harness(tmp_path) as harness, harness.client(harness.token()) as client:
            refused = await client.post("/api/web/chat", json=body)
            history = await client.get("/api/web/history", params={"sessionId": "web_alice_h"})
            other = await sse(
                client, "POST", "/api/web/chat", json={"message": "hi", "sessionId": "web_alice_d"}
            )
    assert refused.status_code == 400
    assert refused.json()["error"].startswith("agent profile 'helper' is broken: helper.toml")
    assert history.status_code == 200 and len(history.json()["messages"]) == 2
    assert other.types()[-1] == "complete"


@pytest.mark.parametrize("error", [HaloError("/srv/secret/path exploded"), StoreFailed("x")])
def test_a_500_never_carries_an_internal_message(error: HaloError) -> None:
    """A 500 never carries an internal message, whatever raised it."""
    resp = error_response(error)
    if resp.status_code == 500:
        assert resp.body == b'{"error":"internal error"}'
    else:
        assert resp.status_code == 503


@pytest.mark.parametrize("workspace", ["/proc", "/proc/self", "/sys/kernel"])
async def test_a_full_tokens_workspace_in_proc_or_sys_is_400_not_500(
    harness: Harness, workspace: str
) -> None:
    """A full token's ``workspace=/proc`` (or ``/sys/...``) gives 400, not 500."""
    with trio.fail_after(10):
        async with harness.client(harness.token("full")) as client:
            minted = await client.post("/api/web/sessions", json={"workspace": workspace})
            chat = await client.post(
                "/api/web/chat", json={"message": "hi", "workspace": workspace}
            )
    for resp in (minted, chat):
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"].startswith("the workspace cannot hold runtime state: ")
