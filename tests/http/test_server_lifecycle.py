"""Server lifetime: clean shutdown (no port left open), several workspaces, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
from web_client import serve_harness, sse


async def test_shutdown_closes_the_port_and_every_runtime(tmp_path: Path) -> None:
    with trio.fail_after(15):
        async with serve_harness(tmp_path) as harness:
            port = harness.server.port
            runtimes = harness.server.front.runtimes
            async with harness.client(harness.token()) as client:
                await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
            assert len(runtimes.opened()) == 1
        assert runtimes.opened() == {}
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", port)


async def test_one_server_serves_several_workspaces(tmp_path: Path) -> None:
    with trio.fail_after(15):
        async with serve_harness(tmp_path) as harness:
            second = tmp_path / "second"
            second.mkdir()
            alice = harness.token("workspace", "alice")
            carol = harness.token("workspace", "carol", second)
            async with harness.client(alice) as a, harness.client(carol) as c:
                await sse(a, "POST", "/api/web/chat", json={"message": "in one"})
                await sse(c, "POST", "/api/web/chat", json={"message": "in two"})
                one = (await a.get("/api/web/sessions")).json()
                two = (await c.get("/api/web/sessions")).json()
            assert one["workspace"] != two["workspace"]
            assert len(one["sessions"]) == len(two["sessions"]) == 1
            assert (second / ".halo" / "events.db").exists()


async def test_the_serve_command_runs_until_sigterm(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    state = tmp_path / "state"
    env = {**os.environ, "HALO_ACTORS_HOME": str(state)}
    cmd = [sys.executable, "-m", "halo_actors", "token", "create", "--account", "dev"]
    created = await trio.run_process(
        [*cmd, "--workspace", str(workspace), "--json"], env=env, capture_stdout=True
    )
    token = json.loads(created.stdout)["token"]
    serve = [
        sys.executable,
        "-m",
        "halo_actors",
        "serve",
        "--port",
        "0",
        "--workspace",
        str(workspace),
    ]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            run = partial(trio.run_process, serve, env=env, stdout=subprocess.PIPE, check=False)
            proc = await nursery.start(run)
            assert proc.stdout is not None
            line = b""
            while not line.endswith(b"\n"):
                line += await proc.stdout.receive_some(1)
            url = line.decode().rsplit(" ", 1)[1].strip()
            async with httpx.AsyncClient(base_url=url, headers={"x-token": token}) as client:
                chat = await sse(client, "POST", "/api/web/chat", json={"message": "hello"})
            assert chat.types()[-1] == "complete"
            proc.send_signal(signal.SIGTERM)
            assert await proc.wait() == 0
