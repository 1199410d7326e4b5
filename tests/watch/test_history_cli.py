"""``python -m halo_actors history --workspace DIR [SESSION] [--json]``: a log read offline.

The workspace's log is made by the embedded runtime (the demo agent: sub-sessions
that report, a shell command); the command then runs as a real subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from terminal import HEIGHT, MISSING, WIDTH, Tmux

from halo_actors import open_runtime

BUDGET = 60.0


async def _busy_workspace(path: Path) -> tuple[str, list[str]]:
    """A root that spawned two sub-sessions and ran a command; everything idle again."""
    async with open_runtime(path) as sup:
        root = await sup.create_session(namespace="cli")
        await sup.send(root, "spawn 2 read the notes")
        await sup.wait_idle(root)
        await sup.send(root, "run printf 'one\\ntwo\\n'")
        await sup.wait_idle(root)
        return root, sup.children(root)


async def _history(*args: str, columns: int = WIDTH) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "COLUMNS": str(columns)}
    command = [sys.executable, "-m", "halo_actors", "history", *args]
    return await trio.run_process(
        command, capture_stdout=True, capture_stderr=True, env=env, check=False
    )


async def test_history_lists_the_roots_shows_a_tree_and_its_transcript(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        root, children = await _busy_workspace(tmp_path)
        listing = await _history("--workspace", str(tmp_path))
        shown = await _history("--workspace", str(tmp_path), root)
        child = await _history("--workspace", str(tmp_path), children[0])
    lines = listing.stdout.decode().splitlines()
    assert lines[0] == "1 root session(s), newest first:"
    assert root in lines[1] and "idle" in lines[1] and "3 session(s)" in lines[1]
    text = shown.stdout.decode()
    assert f"── tree of {root}" in text
    assert "worker1" in text and "worker2" in text
    assert "you › spawn 2 read the notes" in text
    assert "⚙ shell_exec: printf 'one\\ntwo\\n'" in text
    assert "│ one" in text and "│ two" in text  # the tool result, line by line
    assert "ai  › Received the sub-session report." in text or "report" in text
    assert "ai  › Done: read the notes (part " in child.stdout.decode()
    for out in (lines, text.splitlines()):
        assert all(len(line) <= WIDTH for line in out), [x for x in out if len(x) > WIDTH]


async def test_history_json_holds_the_tree_and_the_whole_transcript(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        root, children = await _busy_workspace(tmp_path)
        listing = await _history("--workspace", str(tmp_path), "--json")
        shown = await _history("--workspace", str(tmp_path), root, "--json")
    sessions = json.loads(listing.stdout)["sessions"]
    assert [s["sessionId"] for s in sessions] == [root] and sessions[0]["size"] == 3
    doc = json.loads(shown.stdout)
    assert [row["sessionId"] for row in doc["tree"]] == [root, *children] or {
        row["sessionId"] for row in doc["tree"]
    } == {root, *children}
    assert {row["state"] for row in doc["tree"]} == {"idle"}
    tools = [e for e in doc["transcript"] if e["kind"] == "tool"]
    assert tools[-1]["toolInput"] == {"command": "printf 'one\\ntwo\\n'"}
    assert tools[-1]["output"].startswith("one\ntwo\n")
    kinds = [e["kind"] for e in doc["transcript"]]
    assert kinds[0] == "user" and "assistant" in kinds


async def test_history_errors_are_one_clear_line(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        await _busy_workspace(tmp_path)
        no_log = await _history("--workspace", str(tmp_path / "elsewhere"))
        unknown = await _history("--workspace", str(tmp_path), "cli_nothing")
    for done, message in (
        (no_log, f"no event log in {tmp_path / 'elsewhere'}"),
        (unknown, "no session cli_nothing in this workspace"),
    ):
        assert done.returncode == 2 and done.stdout == b""
        assert done.stderr.decode().startswith(f"error: {message}")
        assert len(done.stderr.decode().splitlines()) == 1


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
async def test_history_fits_an_80_by_24_terminal(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        root, _ = await _busy_workspace(tmp_path)
    command = [sys.executable, "-m", "halo_actors", "history", "--workspace", str(tmp_path), root]
    terminal = Tmux(command)
    try:
        screen = terminal.wait_for("⚙ shell_exec")
        terminal.save("history-80x24.txt", screen)
    finally:
        terminal.close()
    assert len(screen) <= HEIGHT and all(len(line) <= WIDTH for line in screen)
    assert any("ai  ›" in line for line in screen)
