"""End to end: ``python -m halo_actors serve --model …`` (a real subprocess) driven by
curl, against the loopback API of each provider."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
from provider_kit import ANTHROPIC, OPENAI, SECRET, Wire, results_in, serving, tool_loop
from sandbox_check import needs_sandbox
from wire_formats import Turn

SERVE_BUDGET = 60.0
LIVE_CHECK = Path(__file__).resolve().parents[2] / "scripts" / "live_model_check.py"
CURL = shutil.which("curl")
pytestmark = pytest.mark.skipif(CURL is None, reason="curl is not installed")


def base_env(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("HALO_", "OPENAI_", "ANTHROPIC_"))
    }
    return {**env, "HALO_ACTORS_HOME": str(tmp_path / "state"), **extra}


@asynccontextmanager
async def serve(tmp_path: Path, env: dict[str, str], *args: str) -> AsyncIterator[tuple[str, str]]:
    """A ``serve`` process for a fresh workspace: yields (its URL, a token for it)."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    halo = [sys.executable, "-m", "halo_actors"]
    created = await trio.run_process(
        [*halo, "token", "create", "--account", "dev", "--workspace", str(workspace), "--json"],
        env=env,
        capture_stdout=True,
    )
    token = json.loads(created.stdout)["token"]
    command = [*halo, "serve", "--port", "0", "--workspace", str(workspace), *args]
    with (tmp_path / "serve.log").open("wb") as log:
        async with trio.open_nursery() as nursery:
            run = partial(
                trio.run_process, command, env=env, stdout=subprocess.PIPE, stderr=log, check=False
            )
            proc = await nursery.start(run)
            try:
                assert proc.stdout is not None
                line = b""
                while not line.endswith(b"\n"):
                    line += await proc.stdout.receive_some(1)
                yield line.decode().rsplit(" ", 1)[1].strip(), token
            finally:
                proc.send_signal(signal.SIGTERM)
                with trio.move_on_after(20):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()


async def curl(url: str, token: str, *, body: dict[str, object] | None = None) -> str:
    assert CURL is not None
    command = [CURL, "-sS", "-N", "--max-time", "40", "-H", f"x-token: {token}"]
    if body is not None:
        command += ["-H", "content-type: application/json", "-d", json.dumps(body)]
    done = await trio.run_process([*command, url], capture_stdout=True)
    return done.stdout.decode()


def frames(stream: str) -> list[dict[str, object]]:
    return [json.loads(line[5:]) for line in stream.splitlines() if line.startswith("data:")]


@needs_sandbox()
async def test_serve_with_a_model_runs_a_tool_using_conversation(
    tmp_path: Path, wire: Wire
) -> None:
    """Rule: end to end through the runtime: a tool-using conversation (model → shell_exec →
    result → answer) over ``serve --model …`` and curl, for each provider, with the
    request bodies checked. (Anthropic is named by ``--model``, OpenAI by ``HALO_MODEL``,
    ``--model``'s default: each way once.)"""
    spec = f"{wire.name}:test-model"
    via = "--model" if wire is ANTHROPIC else "HALO_MODEL"
    with trio.fail_after(SERVE_BUDGET):
        async with serving(wire, tool_loop(wire)) as server:
            extra = wire.env(server) | ({"HALO_MODEL": spec} if via == "HALO_MODEL" else {})
            args = ("--model", spec) if via == "--model" else ()
            async with serve(tmp_path, base_env(tmp_path, extra), *args) as (url, token):
                chat = frames(await curl(f"{url}/api/web/chat", token, body={"message": "run it"}))
                history = json.loads(await curl(f"{url}/api/web/history", token))
    kinds = [f["type"] for f in chat]
    assert kinds[-1] == "complete" and "tool_call" in kinds
    result = next(f for f in chat if f["type"] == "tool_result")
    assert str(result["result"]).startswith("from-shell")
    streamed = "".join(str(f["text"]) for f in chat if f["type"] == "stream")
    assert streamed.endswith("The command said: from-shell")
    assert server.problems == [] and len(server.requests) == 2
    assert [r.splitlines()[0] for r in results_in(server.requests[1])] == ["from-shell"]
    assert all(s.path == wire.path and s.body["model"] == "test-model" for s in server.requests)  # type: ignore[index]
    last = history["messages"][-1]
    assert last["role"] == "assistant" and last["usage"]["cacheReadTokens"] == 80
    logged = (tmp_path / "serve.log").read_text()
    assert SECRET not in logged and SECRET not in json.dumps(chat) + json.dumps(history)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("anthropic:claude-sonnet-4-5", "set ANTHROPIC_API_KEY"),
        ("gemini:pro", "is not a model spec"),
    ],
)
async def test_serve_refuses_a_bad_model_at_start(tmp_path: Path, spec: str, says: str) -> None:
    """Rule: a missing key for a host that needs one is a clear startup error naming the
    variable; a bad spec says which forms exist."""
    env = base_env(tmp_path, {})
    command = [sys.executable, "-m", "halo_actors", "serve", "--port", "0", "--model", spec]
    with trio.fail_after(SERVE_BUDGET):
        done = await trio.run_process(
            command, env=env, capture_stdout=True, capture_stderr=True, check=False
        )
    assert done.returncode == 2
    assert says in done.stderr.decode() and done.stdout == b""
    assert ANTHROPIC.key_env not in env


async def test_the_live_check_script_runs_one_tool_using_turn(tmp_path: Path) -> None:
    """``scripts/live_model_check.py`` against the loopback API: one tool-using turn, exit 0;
    with no key for the official host it skips (exit 0)."""
    script, wire = LIVE_CHECK, OPENAI
    spec = f"{wire.name}:test-model"
    with trio.fail_after(SERVE_BUDGET):
        async with serving(wire, tool_loop(wire, "echo halo-live-check")) as server:
            env = base_env(tmp_path, wire.env(server))
            done = await trio.run_process(
                [sys.executable, str(script), spec], env=env, capture_stdout=True, check=False
            )
        skipped = await trio.run_process(
            [sys.executable, str(script), spec],
            env=base_env(tmp_path, {}),
            capture_stdout=True,
            check=False,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, out
    assert "ok: the model called the tool" in out and "usage       input 120" in out
    assert server.problems == []
    assert skipped.returncode == 0 and skipped.stdout.decode().startswith(
        f"skipped: {spec} needs an API key"
    )


async def test_front_settings_take_a_spec_string(tmp_path: Path, wire: Wire) -> None:
    """Rule: ``FrontSettings`` accepts a provider object or a spec string: with a spec,
    each workspace's runtime makes (and closes) its own provider from the environment."""
    from web_client import serve_harness, sse

    with trio.fail_after(SERVE_BUDGET):
        async with serving(wire) as server:
            server.queue(wire.stream(Turn(text="from the spec")))
            with pytest.MonkeyPatch.context() as env:
                for name, value in wire.env(server).items():
                    env.setenv(name, value)
                async with serve_harness(tmp_path, model=f"{wire.name}:test-model") as harness:
                    client = harness.client(harness.token())
                    async with client:
                        chat = await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
    assert chat.text() == "from the spec"
    assert len(server.requests) == 1
