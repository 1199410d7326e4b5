"""POST /api/web/interrupt (soft / hard, no message) and POST /api/web/archive."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from proc_table import live_group_members
from sandbox_check import needs_sandbox
from web_client import Harness, sse, wait_until

from halo_actors.agent.repair import UI_INTERRUPTED
from halo_actors.core.events import ToolReturned
from halo_actors.core.log import EventFilter


def _pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text else None


async def test_a_hard_interrupt_kills_the_running_command_and_queues_nothing(
    harness: Harness,
) -> None:
    """Rule: ``hard`` interrupts now, "killing the running command's process group"."""
    token = harness.token("full", "root")  # a full token: the command runs unsandboxed
    sid = "web_root_hard"
    pidfile = harness.workspace / "group.pid"
    with trio.fail_after(20):
        async with harness.client(token) as client, trio.open_nursery() as nursery:
            body = {"message": f"run echo $$ > {pidfile}; sleep 60 && echo late", "sessionId": sid}
            nursery.start_soon(lambda: sse(client, "POST", "/api/web/chat", json=body))
            await wait_until(lambda: _pid(pidfile) is not None)
            pgid = _pid(pidfile)
            assert pgid is not None and live_group_members(pgid)
            resp = await client.post("/api/web/interrupt", json={"mode": "hard", "sessionId": sid})
            assert resp.json() == {"interrupted": True}
            sup = await harness.sup()
            await sup.wait_idle(sid)
            assert live_group_members(pgid) == []
            results = await sup.log.read(
                EventFilter(session_id=sid, kinds=frozenset({"tool_result"}))
            )
            again = await client.post("/api/web/interrupt", json={"mode": "hard", "sessionId": sid})
    (result,) = [r.event for r in results]
    assert isinstance(result, ToolReturned) and result.ui_result == UI_INTERRUPTED
    assert not sup.state(sid).mailbox
    assert again.json() == {"interrupted": False}  # nothing runs any more


@needs_sandbox()
async def test_a_soft_interrupt_ends_the_turn_at_the_next_batch_boundary(harness: Harness) -> None:
    """Rule: ``soft`` stops "the next batch boundary, as a queued message does"."""
    token = harness.token()
    sid = "web_alice_soft"
    gate = harness.workspace / "go"
    with trio.fail_after(20):
        async with harness.client(token) as client, trio.open_nursery() as nursery:
            command = f"while [ ! -f {gate} ]; do sleep 0.02; done; echo went"
            body = {"message": f"run {command}", "sessionId": sid}
            nursery.start_soon(lambda: sse(client, "POST", "/api/web/chat", json=body))
            sup = await harness.sup()
            await wait_until(
                lambda: sup.exists(sid) and any(u.kind == "tool" for u in sup.state(sid).ui)
            )
            resp = await client.post("/api/web/interrupt", json={"mode": "soft", "sessionId": sid})
            gate.touch()
            await sup.wait_idle(sid)
    assert resp.json() == {"interrupted": True}
    state = sup.state(sid)
    (tool,) = [u for u in state.ui if u.kind == "tool"]
    assert tool.output == "went\n[exit code 0]"  # the batch in flight completed
    assert not any(u.kind == "assistant" and "finished" in u.text for u in state.ui)


async def test_archive_archives_ones_own_session_and_hides_it(harness: Harness) -> None:
    token = harness.token()
    with trio.fail_after(20):
        async with harness.client(token) as client:
            await sse(
                client, "POST", "/api/web/chat", json={"message": "hi", "sessionId": "web_alice_a"}
            )
            listed = (await client.get("/api/web/sessions")).json()["sessions"]
            first = await client.post("/api/web/archive", json={"sessionId": "web_alice_a"})
            second = await client.post("/api/web/archive", json={"sessionId": "web_alice_a"})
            after = (await client.get("/api/web/sessions")).json()["sessions"]
            chat = await client.post(
                "/api/web/chat", json={"message": "still there?", "sessionId": "web_alice_a"}
            )
    assert [r["sessionId"] for r in listed] == ["web_alice_a"]
    assert first.json() == {"archived": True} and second.json() == {"archived": False}
    assert after == []
    assert chat.status_code == 409


@pytest.mark.parametrize("route", ["/api/web/interrupt", "/api/web/archive"])
async def test_controls_follow_the_ownership_and_access_rules(harness: Harness, route: str) -> None:
    body = {"mode": "hard"} if route.endswith("interrupt") else {}
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            foreign = await client.post(route, json={**body, "sessionId": "web_bob_1"})
            unknown = await client.post(route, json={**body, "sessionId": "web_alice_none"})
            unsafe = await client.post(route, json={**body, "sessionId": "../x"})
        async with harness.client(harness.token("readonly", "alice")) as client:
            readonly = await client.post(route, json={**body, "sessionId": "web_alice_none"})
        async with harness.client() as client:
            anonymous = await client.post(route, json=body)
    assert foreign.status_code == 403
    assert foreign.json() == {"error": "session not owned by this token"}
    assert unknown.status_code == 200 and set(unknown.json().values()) == {False}
    assert unsafe.status_code == 400 and readonly.status_code == 403
    assert anonymous.status_code == 401


@pytest.mark.parametrize(
    "body", [b"", b"{}", b'{"mode": "gentle"}', b'{"mode": "soft", "why": 1}', b"[1]"]
)
async def test_bad_interrupt_bodies_are_400(harness: Harness, body: bytes) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            resp = await client.post("/api/web/interrupt", content=body)
    assert resp.status_code == 400 and set(resp.json()) == {"error"}
