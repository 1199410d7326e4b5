"""session/prompt: content blocks → one message + images, and the prompt's refusals."""

from __future__ import annotations

import trio
from acp_harness import Rig, at

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


async def _logged_user_rows(rig: Rig, token: str, session_id: str) -> list[dict[str, object]]:
    async with rig.harness.client(token) as client:
        answer = await client.get("/api/web/history", params={"sessionId": session_id})
    rows = answer.json()["messages"]
    return [r for r in rows if r["role"] == "user"]


async def test_content_blocks_become_one_message_and_images_in_prompt_order(rig: Rig) -> None:
    token = rig.token()
    blocks: list[dict[str, object] | str] = [
        "Look at ",
        "this:",
        {"type": "image", "mimeType": "image/png", "data": PNG},
        {
            "type": "resource",
            "resource": {"uri": "file:///a.md", "mimeType": "text/markdown", "text": "x ```` y"},
        },
        {"type": "audio", "mimeType": "audio/wav", "data": "AAAA"},
        {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAEC"}},
        {"type": "resource_link", "name": "spec", "uri": "file:///spec.md"},
        {"type": "hologram", "data": "?"},
        "and ",
        "tell me.",
    ]
    with trio.fail_after(10):
        async with rig.adapter(token=token) as agent:
            session_id = await agent.new_session()
            answer = await agent.prompt(session_id, *blocks)
            [row] = await _logged_user_rows(rig, token, session_id)
    assert answer["result"] == {"stopReason": "end_turn"}
    assert row["text"] == (
        "Look at this:\n\n"
        "[resource: file:///a.md]\n`````\nx ```` y\n`````\n\n"
        "[binary resource omitted: file:///b.bin]\n\n"
        "[resource link: spec file:///spec.md]\n\n"
        "and tell me."
    )
    assert row["images"] == [f"data:image/png;base64,{PNG}"]
    warned = agent.stderr()
    assert "acp_block_dropped" in warned
    assert "audio" in warned and "hologram" in warned


async def test_an_empty_prompt_is_32602(rig: Rig) -> None:
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            empty = await agent.request("session/prompt", {"sessionId": session_id, "prompt": []})
            missing = await agent.request("session/prompt", {"sessionId": session_id})
            only_dropped = await agent.prompt(session_id, {"type": "audio", "data": "AAAA"})
            blank = await agent.prompt(session_id, "   ")
            no_session = await agent.request("session/prompt", {"prompt": [{"type": "text"}]})
    for answer in (empty, missing, only_dropped, blank, no_session):
        assert at(answer, "error", "code") == -32602, answer
    assert rig.proxy.requests("/api/web/chat") == []


async def test_a_second_prompt_while_one_is_in_flight_is_32600(rig: Rig) -> None:
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            first = await agent.start_prompt(session_id, "slow 8")
            await agent.wait_text(session_id, "1\n")
            second = await agent.prompt(session_id, "hello")
            assert (await agent.answer(first))["result"] == {"stopReason": "end_turn"}
            # the slot is free again once the first prompt has resolved
            third = await agent.prompt(session_id, "hello")
    assert at(second, "error", "code") == -32600
    assert third["result"] == {"stopReason": "end_turn"}
    assert len(rig.proxy.requests("/api/web/chat")) == 2
