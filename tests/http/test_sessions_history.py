"""Sessions (mint, list), history, stop and the slash commands."""

from __future__ import annotations

import pytest
import trio
from sandbox_check import needs_sandbox
from web_client import Harness, sse

from halo_actors.core.events import TextStreamed


async def test_mint_creates_a_root_in_the_namespace_without_moving_the_pointer(
    harness: Harness,
) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            chat = await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
            active = chat.frames[0].data["sessionId"]
            minted = (await client.post("/api/web/sessions", json={})).json()["sessionId"]
            again = await sse(client, "POST", "/api/web/chat", json={"message": "again"})
    assert minted.startswith("web_alice_") and minted != active
    assert (await harness.sup()).exists(minted)
    assert again.frames[0].data["sessionId"] == active


async def test_mint_with_an_agent_id_creates_the_session_with_that_profile(
    harness: Harness,
) -> None:
    agents = harness.workspace / ".halo" / "agents"
    agents.mkdir(parents=True)
    (agents / "helper.toml").write_text('description = "the helper profile"\n')
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            minted = (await client.post("/api/web/sessions", json={"agentId": "helper"})).json()
            plain = (await client.post("/api/web/sessions", json={})).json()
            unknown = await client.post("/api/web/sessions", json={"agentId": "nobody"})
    sup = await harness.sup()
    assert sup.state(minted["sessionId"]).agent_id == "helper"
    assert sup.state(plain["sessionId"]).agent_id == "default"
    assert unknown.status_code == 400 and "unknown agent profile" in unknown.json()["error"]


async def test_list_pages_own_roots_newest_first_with_a_cursor(harness: Harness) -> None:
    sup = await harness.sup()
    for i in range(55):
        await sup.create_session(f"web_alice_s{i:02d}", title=f"t{i}" if i % 2 else None)
    await sup.create_session("web_alice_s00>child_1", parent_id="web_alice_s00")
    await sup.create_session("web_bob_1")
    await sup.create_session("web_alice_gone")
    await sup.archive("web_alice_gone")
    with trio.fail_after(10):
        async with harness.client(harness.token("full")) as client:
            first = (await client.get("/api/web/sessions")).json()
            cursor = first["nextCursor"]
            second = (await client.get(f"/api/web/sessions?cursor={cursor}")).json()
            empty_cursor = (await client.get("/api/web/sessions?cursor=")).json()
            bad = [await client.get(f"/api/web/sessions?cursor={c}") for c in ("0x10", "1e3", "-1")]
    assert first["workspace"] == str(harness.workspace.resolve())
    assert len(first["sessions"]) == 50 and isinstance(cursor, int)
    stamps = [s["updatedAt"] for s in first["sessions"] + second["sessions"]]
    assert stamps == sorted(stamps, reverse=True)
    assert all(s["updatedAt"] < cursor for s in second["sessions"])
    listed = {s["sessionId"] for s in first["sessions"] + second["sessions"]}
    assert listed <= {f"web_alice_s{i:02d}" for i in range(55)}
    assert second["nextCursor"] is None or second["sessions"]
    assert empty_cursor == first
    for resp in bad:
        assert resp.status_code == 400 and resp.json() == {"error": "Invalid cursor"}


async def test_list_titles_fall_back_to_the_description(harness: Harness) -> None:
    sup = await harness.sup()
    await sup.create_session("web_alice_a", title="A title")
    await sup.create_session("web_alice_b", description="a description")
    await sup.create_session("web_alice_c")
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            page = (await client.get("/api/web/sessions")).json()
    titles = {s["sessionId"]: s["title"] for s in page["sessions"]}
    assert titles == {"web_alice_a": "A title", "web_alice_b": "a description", "web_alice_c": None}
    assert page["nextCursor"] is None


async def test_a_workspace_without_halo_lists_empty_and_stays_untouched(harness: Harness) -> None:
    bare = harness.tmp / "bare"
    bare.mkdir()
    with trio.fail_after(10):
        async with harness.client(harness.token("full")) as client:
            page = (await client.get("/api/web/sessions", params={"workspace": str(bare)})).json()
    assert page == {"workspace": str(bare.resolve()), "sessions": [], "nextCursor": None}
    assert list(bare.iterdir()) == []


@needs_sandbox()
async def test_history_rows_since_filter_and_unknown_ids(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            await sse(client, "POST", "/api/web/chat", json={"message": "think"})
            await sse(client, "POST", "/api/web/chat", json={"message": "bigtool"})
            full = (await client.get("/api/web/history")).json()
            since = full["messages"][2]["timestamp"]
            tail = (await client.get(f"/api/web/history?since={since}")).json()
            empty_since = (await client.get("/api/web/history?since=")).json()
            bad = await client.get("/api/web/history?since=12a")
            unknown = await client.get("/api/web/history?sessionId=web_alice_none")
    assert full["running"] is False
    roles = [m["role"] for m in full["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "assistant"]
    thinking = full["messages"][1]["contentBlocks"]
    assert thinking == [{"type": "thinking", "text": "hmm"}, {"type": "text", "text": "thought"}]
    use = full["messages"][3]["contentBlocks"][0]
    assert use["type"] == "tool_use" and use["toolName"] == "shell_exec"
    assert use["output"].startswith("1\n2\n") and use["isError"] is False
    assert all(m["timestamp"] >= since for m in tail["messages"])
    assert tail["messages"][0]["text"] == "bigtool"
    assert empty_since == full
    assert bad.status_code == 400 and bad.json() == {"error": "Invalid since"}
    assert unknown.status_code == 404 and unknown.json() == {"error": "session not found"}


async def test_history_keeps_sub_session_rows_out_and_sees_new_records(harness: Harness) -> None:
    with trio.fail_after(15):
        async with harness.client(harness.token()) as client:
            chat = await sse(client, "POST", "/api/web/chat", json={"message": "spawn 1 look"})
            sid = str(chat.frames[0].data["sessionId"])
            sup = await harness.sup()
            await sup.wait_idle(sid)
            first = (await client.get("/api/web/history")).json()
            await sup.actor(sid).emit(TextStreamed(text="ignored by history"))
            await sse(client, "POST", "/api/web/chat", json={"message": "more"})
            second = (await client.get("/api/web/history")).json()
    texts = [m["text"] for m in first["messages"]]
    assert "look (part 1 of 1)" not in texts  # the child's own round stays in the child
    assert any("[Final report" in str(t) for t in texts)  # its report to the parent is here
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["messages"][-2]["text"] == "more"


async def test_history_without_any_session_is_empty_and_creates_nothing(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            body = (await client.get("/api/web/history")).json()
    assert body["messages"] == [] and body["running"] is False
    assert body["sessionId"].startswith("web_alice_")
    assert not (harness.workspace / ".halo").exists()


async def test_session_new_and_switch_move_the_active_pointer(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            first = await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
            old = first.frames[0].data["sessionId"]
            new = await sse(client, "POST", "/api/web/chat", json={"message": "/session new"})
            assert new.types() == ["session", "switch", "complete"]
            fresh = new.frames[1].data["sessionId"]
            assert new.frames[0].data["sessionId"] == old and fresh != old
            here = await sse(client, "POST", "/api/web/chat", json={"message": "hello"})
            assert here.frames[0].data["sessionId"] == fresh
            back = await sse(
                client, "POST", "/api/web/chat", json={"message": f"/session switch {old}"}
            )
            assert back.frames[1].data == {"type": "switch", "sessionId": old}
            hist = (await client.get("/api/web/history")).json()
            assert hist["sessionId"] == old
            foreign = await client.post("/api/web/chat", json={"message": "/session switch cli_x"})
            usage = await client.post("/api/web/chat", json={"message": "/session bogus"})
    assert foreign.status_code == 403
    assert usage.status_code == 400


async def test_compact_and_tree_commands(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            for text in ("one", "two", "three"):
                await sse(client, "POST", "/api/web/chat", json={"message": text})
            compact = await sse(client, "POST", "/api/web/chat", json={"message": "/compact"})
            tree = await sse(client, "POST", "/api/web/chat", json={"message": "/tree"})
    assert compact.types()[0] == "session" and compact.types()[-1] == "complete"
    sup = await harness.sup()
    (state,) = sup.sessions()
    assert state.messages[0].text().startswith("[summary of the earlier conversation]")
    assert tree.types() == ["session", "stream", "complete"]
    assert f"{state.session_id} [idle] one (this session)" in tree.text()  # titled by "one"


async def test_without_a_pointer_a_chat_goes_to_the_most_recently_updated_own_live_root(
    harness: Harness,
) -> None:
    sup = await harness.sup()
    for sid in ("web_alice_older", "web_alice_newer", "web_alice_archived"):
        await sup.create_session(sid)
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            # Explicit ids never set the pointer; this makes "older" the latest updated
            # (after a pause: record times are in milliseconds).
            await trio.sleep(0.005)
            body = {"message": "hi", "sessionId": "web_alice_older"}
            await sse(client, "POST", "/api/web/chat", json=body)
            await sup.create_session("web_alice_older>child_1", parent_id="web_alice_older")
            await sup.archive("web_alice_archived")
            await sup.create_session("web_bob_latest")
            assert sup.state("web_alice_older").updated_ts > sup.state("web_alice_newer").updated_ts
            chat = await sse(client, "POST", "/api/web/chat", json={"message": "where am i"})
    assert chat.frames[0].data["sessionId"] == "web_alice_older"
    assert sup.state("web_alice_older").messages[-1].text() == "Done: where am i"


@pytest.mark.parametrize("how", ["archive", "delete"])
async def test_an_archived_or_deleted_active_session_gives_way_to_the_latest_root_then_a_fresh_one(
    harness: Harness, how: str
) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:

            async def chat_without_id() -> str:
                read = await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
                return str(read.frames[0].data["sessionId"])

            first = await chat_without_id()
            other = (await client.post("/api/web/sessions", json={})).json()["sessionId"]
            assert await chat_without_id() == first  # the pointer holds while it is live
            sup = await harness.sup()
            end = sup.archive if how == "archive" else sup.delete
            await end(first)
            assert await chat_without_id() == other
            await end(other)
            fresh = await chat_without_id()
    assert fresh not in (first, other) and fresh.startswith("web_alice_")
    assert sup.is_live(fresh)


async def test_a_deleted_session_chatted_to_again_has_only_its_new_history(
    harness: Harness,
) -> None:
    sid = "web_alice_reused-id"
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            await sse(client, "POST", "/api/web/chat", json={"message": "hi", "sessionId": sid})
            first = (await client.get("/api/web/history", params={"sessionId": sid})).json()
            sup = await harness.sup()
            await sup.delete(sid)
            await sse(client, "POST", "/api/web/chat", json={"message": "hey", "sessionId": sid})
            second = (await client.get("/api/web/history", params={"sessionId": sid})).json()
    assert (first["messages"][0]["role"], first["messages"][0]["text"]) == ("user", "hi")
    assert (second["messages"][0]["role"], second["messages"][0]["text"]) == ("user", "hey")
    assert "hi" not in [m["text"] for m in second["messages"]]
    assert sup.state(sid).messages[0].text() == "hey"
