"""Every program in ``examples/`` runs as its docstring says, and does what it says.

Each runs in a subprocess with this environment's interpreter, in a scratch
directory; servers listen on free loopback ports and are stopped at the end.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import httpx
import trio

BUDGET = 60.0
HALO = (sys.executable, "-m", "halo_actors")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TESTED = {
    "embed_live_events.py",
    "custom_tool.py",
    "custom_model.py",
    "fastapi_app.py",
    "real_model_server.py",  # tests/models/test_custom_tool_turns.py (it needs the wire servers)
}


def test_every_example_has_a_test() -> None:
    """Rule: every example runs in make test."""
    assert {p.name for p in EXAMPLES.glob("*.py")} == TESTED


async def run_example(name: str, tmp_path: Path) -> str:
    with trio.fail_after(BUDGET):
        done = await trio.run_process(
            [sys.executable, str(EXAMPLES / name), str(tmp_path / "ws")],
            cwd=tmp_path,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert (done.returncode, done.stderr.decode()) == (0, "")
    return done.stdout.decode()


async def test_embedding_with_live_events(tmp_path: Path) -> None:
    out = await run_example("embed_live_events.py", tmp_path)
    assert out.count("created (default)") == 3
    assert out.count("reports up (final)") == 2
    assert out.splitlines()[-1] == "final answer: Received the sub-session report."


async def test_a_custom_tool(tmp_path: Path) -> None:
    out = await run_example("custom_tool.py", tmp_path)
    assert 'check_stock [ok]: {"item":"tea","warehouse":"main","count":12,"by":"clerk"}' in out
    assert "check_stock [error]: invalid arguments for check_stock: Expected `str`" in out
    assert out.splitlines()[-1] == "answer: Checking both. We have 12 tea."


async def test_a_custom_model(tmp_path: Path) -> None:
    out = await run_example("custom_model.py", tmp_path)
    assert re.fullmatch(r"It is \d\d:\d\d\. \n", out), out


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def wait_listening(url: str) -> None:
    async with httpx.AsyncClient() as client:
        while True:
            try:
                await client.get(url)
                return
            except httpx.TransportError:
                await trio.sleep(0.1)


@asynccontextmanager
async def serving(argv: list[str], url: str, cwd: Path, env: dict[str, str]) -> AsyncIterator[None]:
    """Run a server process until the block ends; SIGTERM, then wait for it."""
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(trio.run_process, argv, cwd=cwd, env=env, check=False)
        )
        try:
            await wait_listening(url)
            yield
        finally:
            process.send_signal(signal.SIGTERM)
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await process.wait()
            process.kill()


async def test_an_asyncio_app_uses_the_runtime_through_the_http_front(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    env = {**os.environ, "HALO_ACTORS_HOME": str(tmp_path / "state")}
    with trio.fail_after(BUDGET):
        created = await trio.run_process(
            [*HALO, "token", "create", "--account", "app", "--workspace", str(tmp_path / "ws")],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
        )
        halo_port, app_port = free_port(), free_port()
        halo = f"http://127.0.0.1:{halo_port}"
        env |= {"HALO_ACTORS_URL": halo, "HALO_ACTORS_TOKEN": created.stdout.decode().strip()}
        env["PYTHONPATH"] = str(EXAMPLES.parent)
        serve = [*HALO, "serve", "--port", str(halo_port)]
        uvicorn = [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app"]
        uvicorn += ["--port", str(app_port), "--log-level", "warning"]
        app = f"http://127.0.0.1:{app_port}"
        async with (
            serving(serve, f"{halo}/api/openapi.json", tmp_path, env),
            serving(uvicorn, f"{app}/docs", tmp_path, env),
            httpx.AsyncClient(base_url=app, timeout=30) as client,
        ):
            first = (await client.post("/ask", json={"question": "count to 3"})).json()
            again = await client.post(
                "/ask", json={"question": "run echo hi", "session_id": first["session_id"]}
            )
    assert first["answer"] == "1\n2\n3\n" and first["session_id"].startswith("web_app_")
    assert again.json()["tools"] == ["shell_exec"]
    assert again.json()["session_id"] == first["session_id"]
