"""The escape suite: a hostile `workspace` token drives the default agent's `run <command>`.

A real server (hypercorn on loopback, ``web_client.serve_harness``) with three tokens:
alice (`workspace`, the attacker), bob (`workspace`, same workspace: his conversation
sits in the shared `.halo/`), carol (`workspace`, another workspace). Every attempt of
``docs/security.md``'s threat model must fail, and the server must stay up; the same
commands from a `full` session work (no regression), and a `readonly` one has no shell.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from sandbox_check import needs_sandbox
from web_client import TEST_SCRIPT, Harness, serve_harness, sse

from halo_actors.agent.scripted import Rule, Script, ScriptedCall, ScriptedModel, Step
from halo_actors.core.events import ToolReturned
from halo_actors.core.log import EventFilter

pytestmark = needs_sandbox()

BUDGET = 60.0
BOB_WORDS = "bob-private-7f3a"
CAROL_WORDS = "carol-private-91c2"
MAX_PROCESSES = 24


def _read_rule() -> Rule:
    """`read <path>`: the agent calls `file_read` (the file tools' half of the suite)."""
    return Rule(
        match=r"^read (\S+)$",
        build=lambda m: (
            Step(calls=(ScriptedCall(name="file_read", input={"path": m.group(1)}),)),
            Step(text="read done"),
        ),
    )


@dataclass
class Scene:
    harness: Harness
    alice: str
    bob: str
    full: str
    readonly: str
    other_ws: Path

    @property
    def state(self) -> Path:
        return self.harness.store.state_dir

    @property
    def ws(self) -> Path:
        return self.harness.workspace


@pytest.fixture
async def scene(tmp_path: Path) -> AsyncIterator[Scene]:
    ws = tmp_path / "ws"
    agents = ws / ".halo" / "agents"
    agents.mkdir(parents=True)
    (agents / "default.toml").write_text(
        f"[limits]\nshell_timeout = 20\nmax_processes = {MAX_PROCESSES}\nkill_grace = 0.2\n"
    )
    other = tmp_path / "other_ws"
    other.mkdir()
    model = ScriptedModel({}, fallback=Script(rules=(_read_rule(), *TEST_SCRIPT.rules)))
    async with serve_harness(tmp_path, model=model) as harness:
        alice = harness.token("workspace", "alice")
        scene = Scene(
            harness,
            alice=alice,
            bob=harness.token("workspace", "bob"),
            full=harness.token("full", "root"),
            readonly=harness.token("readonly", "eve"),
            other_ws=other,
        )
        carol = harness.token("workspace", "carol", other)
        with trio.fail_after(BUDGET):
            await chat(scene, scene.bob, f"remember {BOB_WORDS}")
            await chat(scene, carol, f"remember {CAROL_WORDS}", workspace=other)
        yield scene


async def chat(
    scene: Scene, token: str, message: str, *, workspace: Path | None = None, **body: object
) -> tuple[str, list[str]]:
    """Send ``message``; return (session id, full text of every tool result of the run)."""
    async with scene.harness.client(token) as client:
        read = await sse(client, "POST", "/api/web/chat", json={"message": message, **body})
    session_id = str(read.frames[0].data["sessionId"])
    sup = await scene.harness.sup(workspace)
    first = read.frames[0].id.seq
    records = await sup.log.read(EventFilter(session_id=session_id), after_seq=first)
    return session_id, [r.event.result for r in records if isinstance(r.event, ToolReturned)]


async def run(scene: Scene, token: str, command: str) -> str:
    _, results = await chat(scene, token, f"run {command}")
    assert len(results) == 1, results
    return results[0]


async def assert_server_up(scene: Scene) -> None:
    async with scene.harness.client(scene.full) as client:
        resp = await client.get("/api/web/sessions")
    assert resp.status_code == 200


# --- from a workspace session: every attempt fails, the server stays up -------------


async def test_a_workspace_session_cannot_read_or_rewrite_the_token_file(scene: Scene) -> None:
    """Rule: no view of the token file (read it, or write itself a full token)."""
    tokens = scene.state / "tokens.json"
    before = tokens.read_bytes()
    forge = (
        f"python3 -c \"import json; p='{tokens}'; d=json.load(open(p)); "
        "d['tokens'][0]['access']='full'; json.dump(d, open(p,'w'))\""
    )
    with trio.fail_after(BUDGET):
        read = await run(scene, scene.alice, f"cat {tokens}; ls -a {scene.state}")
        wrote = await run(scene, scene.alice, forge)
        await assert_server_up(scene)
    assert "sha256" not in read and "No such file or directory" in read
    assert "No such file or directory" in wrote
    assert tokens.read_bytes() == before
    assert all(t.access != "full" for t in scene.harness.store.load() if t.account_id == "alice")


async def test_a_workspace_session_cannot_read_runtime_state_of_its_own_workspace(
    scene: Scene,
) -> None:
    """Rule: no view of `.halo/` of its own workspace (the original hole: another
    account's conversation read from `.halo/events.db-wal`)."""
    with trio.fail_after(BUDGET):
        out = await run(
            scene,
            scene.alice,
            "ls -A .halo; cat .halo/events.db .halo/events.db-wal; grep -r bob .",
        )
        wrote = await run(scene, scene.alice, "echo x > .halo/agents/default.toml")
        await assert_server_up(scene)
    assert BOB_WORDS not in out and "sha256" not in out
    assert "No such file or directory" in out
    assert "cannot create .halo/agents/default.toml" in wrote
    assert "max_processes" in (scene.ws / ".halo" / "agents" / "default.toml").read_text()


async def test_a_workspace_session_cannot_read_another_workspaces_event_log(
    scene: Scene,
) -> None:
    """Rule: no view of other workspaces."""
    log = scene.other_ws / ".halo" / "events.db"
    files = [log, *(log.with_name(log.name + side) for side in ("-wal", "-halo-journal"))]
    assert CAROL_WORDS.encode() in b"".join(f.read_bytes() for f in files if f.exists())
    with trio.fail_after(BUDGET):
        out = await run(scene, scene.alice, f"cat {' '.join(map(str, files))}; ls {scene.other_ws}")
        await assert_server_up(scene)
    assert CAROL_WORDS not in out and "No such file or directory" in out


async def test_a_workspace_session_cannot_write_outside_its_workspace(scene: Scene) -> None:
    """Rule: write outside the workspace fails (system dirs read-only, the rest absent)."""
    outside = scene.harness.tmp / "escaped.txt"
    with trio.fail_after(BUDGET):
        out = await run(
            scene, scene.alice, f"echo x > {outside}; echo y > /usr/escaped; echo z > ../escaped"
        )
        await assert_server_up(scene)
    assert not outside.exists() and not (Path("/") / "usr" / "escaped").exists()
    assert not (scene.ws.parent / "escaped").exists()
    assert "Read-only file system" in out


async def test_a_workspace_session_cannot_see_or_signal_the_server(scene: Scene) -> None:
    """Rule: read /proc/<server pid>/environ or signal the server: both fail."""
    me = os.getpid()
    with trio.fail_after(BUDGET):
        out = await run(
            scene,
            scene.alice,
            f"cat /proc/{me}/environ; kill -TERM {me}; kill -KILL -1; echo after",
        )
        await assert_server_up(scene)
    assert f"/proc/{me}/environ: No such file or directory" in out
    assert "PATH=" not in out


async def test_a_symlink_the_command_made_does_not_lead_file_tools_outside(
    scene: Scene,
) -> None:
    """Rule: following a symlink the command created inside the workspace to the outside
    fails, through the file tools and through /api/web/file."""
    tokens = scene.state / "tokens.json"
    carol_log = scene.other_ws / ".halo" / "events.db"
    links = {"to_tokens": tokens, "to_carol": carol_log, "to_halo": scene.ws / ".halo/events.db"}
    command = "; ".join(f"ln -s {target} {name}" for name, target in links.items())
    with trio.fail_after(BUDGET):
        await run(scene, scene.alice, command + "; ln -s / to_root")
        for name in links:
            assert (scene.ws / name).is_symlink()  # the links are really there
            _, (read,) = await chat(scene, scene.alice, f"read {name}")
            assert "sha256" not in read and CAROL_WORDS not in read and BOB_WORDS not in read
            assert "not accessible" in read or "outside the workspace" in read
            async with scene.harness.client(scene.alice) as client:
                resp = await client.get("/api/web/file", params={"path": name})
            assert resp.status_code == 403 and "sha256" not in resp.text
        async with scene.harness.client(scene.alice) as client:
            resp = await client.get("/api/web/file", params={"path": "to_root/etc/passwd"})
        assert resp.status_code == 403
        await assert_server_up(scene)


async def test_a_workspace_session_cannot_reach_the_servers_port(scene: Scene) -> None:
    """Rule: reach the server's own port when network is off: fails."""
    port = scene.harness.server.port
    with trio.fail_after(BUDGET):
        out = await run(scene, scene.alice, _http_probe(port))
        await assert_server_up(scene)
    assert "HTTP/1.1" not in out and "Connection refused" in out


async def test_a_fork_bomb_is_bounded_and_the_server_stays_up(scene: Scene) -> None:
    """Rule: a fork bomb is bounded (pids limit) without taking the server down."""
    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            done = trio.Event()

            async def bomb() -> None:
                out = await run(scene, scene.alice, "b0mb(){ b0mb|b0mb & }; b0mb; sleep 1")
                assert "fork" in out.lower()
                done.set()

            nursery.start_soon(bomb)
            while not done.is_set():  # the server answers all along
                await assert_server_up(scene)
                await trio.sleep(0.2)
        await assert_server_up(scene)
    assert _processes_with("b0mb") == []


async def test_a_sandboxed_commands_background_jobs_end_when_it_returns(scene: Scene) -> None:
    """Rule: nothing outlives a sandboxed command: when its tool call returns, the jobs it
    left in the background are gone (an unconfined command's would still run)."""
    with trio.fail_after(BUDGET):
        for _ in range(3):
            out = await run(scene, scene.alice, "sleep 37.25 & sleep 37.25 & echo left")
            assert "left" in out
            assert _processes_with("37.25") == []


def _processes_with(word: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if word.encode() in cmdline:
                found.append(int(name))
    return found


async def test_a_stronger_tokens_message_does_not_raise_a_workspace_session(
    scene: Scene,
) -> None:
    """Rule: never raised by a later message from a stronger token; sub-sessions inherit."""
    tokens = scene.state / "tokens.json"
    with trio.fail_after(BUDGET):
        sid, _ = await chat(scene, scene.alice, "hello")
        _, (out,) = await chat(scene, scene.full, f"run cat {tokens}", sessionId=sid)
        assert "sha256" not in out and "No such file or directory" in out
        kid = f"{sid}>kid"  # a sub-session the full token creates under alice's session
        _, (from_kid,) = await chat(scene, scene.full, f"run cat {tokens}", sessionId=kid)
        sup = await scene.harness.sup()
    assert "sha256" not in from_kid and "No such file or directory" in from_kid
    assert sup.access_of(sid) == "workspace" and sup.access_of(kid) == "workspace"


# --- readonly: no shell at all; full: the same commands work ---------------------


async def test_a_readonly_session_has_no_shell_at_all(scene: Scene, tmp_path: Path) -> None:
    """Rule: from a readonly session any shell at all fails."""
    marker = scene.ws / "ran.txt"
    with trio.fail_after(BUDGET):
        async with scene.harness.client(scene.readonly) as client:
            resp = await client.post("/api/web/chat", json={"message": f"run touch {marker}"})
        assert resp.status_code == 403
        sup = await scene.harness.sup()
        sid = await sup.create_session(namespace="web_eve", access="readonly")
        await sup.send(sid, f"run touch {marker}")
        await sup.wait_idle(sid)
        results = [
            r.event
            for r in await sup.log.read(EventFilter(session_id=sid))
            if isinstance(r.event, ToolReturned)
        ]
    assert [r.is_error for r in results] == [True]
    assert "unknown tool 'shell_exec'" in results[0].result
    assert not marker.exists()


async def test_a_full_session_runs_the_same_commands_unconfined(scene: Scene) -> None:
    """Rule: from a full session the same commands work (no regression)."""
    tokens = scene.state / "tokens.json"
    outside = scene.harness.tmp / "written-by-full.txt"
    probe = _http_probe(scene.harness.server.port)
    with trio.fail_after(BUDGET):
        read = await run(scene, scene.full, f"cat {tokens}")
        halo = await run(scene, scene.full, "ls -A .halo")
        wrote = await run(scene, scene.full, f"echo ok > {outside} && cat {outside}")
        environ = await run(scene, scene.full, f"tr '\\0' '\\n' < /proc/{os.getpid()}/environ")
        reached = await run(scene, scene.full, probe)
    assert "sha256" in read and json.loads(read.rsplit("\n[exit", 1)[0])["tokens"]
    assert "events.db" in halo
    assert wrote.startswith("ok\n") and outside.read_text() == "ok\n"
    assert "PATH=" in environ
    assert "HTTP/1.1 401" in reached


def _http_probe(port: int) -> str:
    """A shell command sending one HTTP request to the server's port and printing the answer."""
    request = "GET /api/web/sessions HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n"
    return f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && printf \"{request}\" >&3 && cat <&3'"
