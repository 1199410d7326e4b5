"""The JSON-RPC surface: initialize, authenticate, unknown methods, bad lines, the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import trio
from acp_harness import Rig, at, close_adapter, text_at

import halo_actors


async def test_initialize_answers_protocol_1_with_the_advertised_capabilities(rig: Rig) -> None:
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            result = await agent.result("initialize", {"protocolVersion": 1})
    assert result == {
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": True,
            "sessionCapabilities": {"list": {}},
            "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
        },
        "authMethods": [],
        "agentInfo": {
            "name": "halo_actors",
            "title": "halo_actors",
            "version": halo_actors.__version__,
        },
    }


async def test_the_adapter_keeps_nothing_on_disk(rig: Rig) -> None:
    home, cwd = rig.tmp / "home", rig.tmp / "cwd"
    home.mkdir()
    cwd.mkdir()
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "TMPDIR": str(home)}
    with trio.fail_after(10):
        async with rig.adapter(env=env, cwd=cwd) as agent:
            session_id = await agent.new_session()
            assert (await agent.prompt(session_id, "hello"))["result"] == {"stopReason": "end_turn"}
            await agent.result("session/list", {})
    assert list(home.iterdir()) == [] and list(cwd.iterdir()) == []


async def test_authenticate_with_a_method_the_agent_did_not_advertise_is_refused(
    rig: Rig,
) -> None:
    """ACP: ``authenticate`` with a method id the agent did not advertise → JSON-RPC error."""
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            init = await agent.result("initialize", {"protocolVersion": 1})
            advertised = at(init, "authMethods")
            assert advertised == []
            cases: list[dict[str, object]] = [{"methodId": "anything"}, {}, {"methodId": 7}]
            for params in cases:
                answer = await agent.request("authenticate", params)
                assert at(answer, "error", "code") == -32602, answer
                assert "unknown authentication method" in text_at(answer, "error", "message")
            assert rig.proxy.seen == []  # nothing went to the server
            await agent.result("session/list", {})  # the connection stays usable


async def test_unknown_requests_get_32601_and_unknown_notifications_are_ignored(rig: Rig) -> None:
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            await agent.notify("$/cancel_request", {"id": 1})
            await agent.notify("no/such_notification", {})
            answer = await agent.request("no/such_method", {})
            assert at(answer, "error", "code") == -32601
            # the connection stays usable, and the notifications got no answer
            await agent.result("initialize", {"protocolVersion": 1})
    answers = [m for m in agent.messages if "method" not in m]
    assert [m["id"] for m in answers] == [1, 2]


async def test_bad_lines_get_parse_or_invalid_request_errors_and_the_connection_stays_usable(
    rig: Rig,
) -> None:
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            await agent.send_line(b"this is not json")
            parse = await agent.wait_for(lambda m: "error" in m)
            await agent.send({"id": 7, "method": "initialize"})  # no "jsonrpc": "2.0"
            invalid = await agent.wait_for(lambda m: m.get("id") == 7)
            await agent.send({"jsonrpc": "2.0", "id": 8, "method": "initialize", "params": [1]})
            bad_params = await agent.wait_for(lambda m: m.get("id") == 8)
            await agent.result("initialize", {"protocolVersion": 1})
    assert parse == {"jsonrpc": "2.0", "id": None, "error": parse["error"]}
    assert at(parse, "error", "code") == -32700
    assert at(invalid, "error", "code") == -32600
    assert at(bad_params, "error", "code") == -32602


async def test_cancel_sent_as_a_request_is_answered_null(rig: Rig) -> None:
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            answer = await agent.request("session/cancel", {"sessionId": session_id})
    assert answer == {"jsonrpc": "2.0", "id": 2, "result": None}


async def test_extra_headers_split_on_the_first_colon_and_never_replace_token_or_type(
    rig: Rig,
) -> None:
    token = rig.token()
    args = ["--header", "X-Route: a:b:c", "--header", "x-token: forged"]
    args += ["--header", "Content-Type: text/plain"]
    with trio.fail_after(10):
        async with rig.adapter(*args, token=token) as agent:
            await agent.new_session()
    [seen] = rig.proxy.requests("/api/web/sessions")
    assert seen.headers["x-route"] == "a:b:c"
    assert seen.headers["x-token"] == token
    assert seen.headers["content-type"] == "application/json"


async def test_the_token_can_come_from_the_environment(rig: Rig) -> None:
    token = rig.token()
    with trio.fail_after(10):
        async with rig.adapter(token="", env={"HALO_ACTORS_TOKEN": token}) as agent:
            await agent.new_session()
    [seen] = rig.proxy.requests("/api/web/sessions")
    assert seen.headers["x-token"] == token


async def test_workspace_option_sends_the_workspace_on_every_request_for_a_full_token(
    rig: Rig,
) -> None:
    other = rig.tmp / "other"
    other.mkdir()
    with trio.fail_after(10):
        async with rig.adapter("--workspace", str(other), token=rig.token("full")) as agent:
            session_id = await agent.new_session()
            answer = await agent.prompt(session_id, "hi")
            await agent.result("session/list", {})
            sup = await rig.harness.sup(other)
    assert answer["result"] == {"stopReason": "end_turn"}
    assert agent.text(session_id) == "Done: hi"
    assert sup.exists(session_id)
    assert not (rig.harness.workspace / ".halo").exists()  # the token's own was never used
    routes = [(seen.method, seen.route) for seen in rig.proxy.seen]
    assert routes == [
        ("POST", "/api/web/sessions"),
        ("POST", "/api/web/chat"),
        ("GET", "/api/web/sessions"),
    ]
    for seen in rig.proxy.seen:
        if seen.method == "POST":
            assert json.loads(seen.body)["workspace"] == str(other), seen
        else:
            assert parse_qs(urlsplit(seen.path).query)["workspace"] == [str(other)], seen


async def test_workspace_option_with_a_non_full_token_is_refused_by_the_server(rig: Rig) -> None:
    other = rig.tmp / "other"
    other.mkdir()
    with trio.fail_after(10):
        async with rig.adapter("--workspace", str(other)) as agent:
            answer = await agent.request("session/new", {"cwd": "/", "mcpServers": []})
    assert at(answer, "error", "code") == -32602
    message = text_at(answer, "error", "message")
    assert "403" in message and "only a full token may choose the workspace" in message
    assert list(other.iterdir()) == []


async def test_a_refused_token_answers_auth_required(rig: Rig) -> None:
    with trio.fail_after(10):
        async with rig.adapter(token="not-a-real-token") as agent:
            answer = await agent.request("session/new", {"cwd": "/", "mcpServers": []})
    assert at(answer, "error", "code") == -32000
    assert "401" in text_at(answer, "error", "message")


def test_bad_arguments_exit_2_with_one_line_on_stderr_and_nothing_on_stdout() -> None:
    env = {"PATH": "/usr/bin:/bin"}  # no HALO_ACTORS_TOKEN
    for args, said in (
        ([], "a token is required"),
        (["--token", "t", "--header", "no colon here"], "--header needs 'Name: value'"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "halo_actors", "acp", *args],
            capture_output=True,
            env=env,
            timeout=30,
            check=False,
        )
        assert done.returncode == 2
        assert done.stdout == b""
        assert said in done.stderr.decode()


async def test_end_of_input_abandons_a_prompt_in_flight_and_the_server_turn_goes_on(
    rig: Rig,
) -> None:
    with trio.fail_after(15):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            await agent.start_prompt(session_id, "slow 12")
            await agent.wait_text(session_id, "1\n")
            assert await close_adapter(agent) == 0
            sup = await rig.sup()
            await sup.wait_idle(session_id)
    assert sup.state(session_id).last_output.split() == [str(i) for i in range(1, 13)]
    assert rig.proxy.requests("/api/web/stop") == []  # abandoned, not cancelled
