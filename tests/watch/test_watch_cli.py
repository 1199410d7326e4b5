"""``python -m halo_actors watch --url URL --token T [SESSION]`` against a real server.

The server is ``python -m halo_actors serve`` (a subprocess, so it can restart on the
same port); the watcher is a subprocess too: with ``--plain`` its lines are read from
a pipe, and its live view runs in tmux at 80×24 and is read with capture-pane.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from queue import Empty, Queue
from typing import TextIO

import httpx
import pytest
from sandbox_check import needs_sandbox
from served import WebServer
from terminal import HEIGHT, MISSING, WIDTH, Tmux

from halo_actors.demo.feed import describe

BUDGET = 30.0


def chat(server: WebServer, token: str, session_id: str, message: str) -> None:
    """Send a message and read its SSE answer to the end (the run's complete)."""
    body = {"message": message, "sessionId": session_id}
    with (
        httpx.Client(base_url=server.url, headers={"x-token": token}, timeout=BUDGET) as client,
        client.stream("POST", "/api/web/chat", json=body) as answer,
    ):
        assert answer.status_code == 200
        for _ in answer.iter_lines():
            pass


class Lines:
    """A subprocess's stdout, line by line, readable with a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: Queue[str] = Queue()
        assert process.stdout is not None
        threading.Thread(target=self._read, args=(process.stdout,), daemon=True).start()

    def _read(self, stdout: TextIO) -> None:
        for line in stdout:
            self._queue.put(line)

    def until(self, pattern: str) -> str:
        deadline = time.monotonic() + BUDGET
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except Empty:
                raise AssertionError(
                    f"never saw {pattern!r}; saw:\n" + "".join(self.seen)
                ) from None
            self.seen.append(line)
            if re.search(pattern, line):
                return line


@pytest.fixture
def watcher_env(server: WebServer) -> Iterator[dict[str, str]]:
    yield {**os.environ, "HALO_ACTORS_TOKEN": server.token("workspace", "alice")}


def test_watch_follows_a_tree_and_resumes_after_a_restart_missing_nothing(
    server: WebServer, watcher_env: dict[str, str]
) -> None:
    """Rule: reconnecting on drops; a resumed stream has no gap and no duplicate."""
    token = watcher_env["HALO_ACTORS_TOKEN"]
    root = "web_alice_watched"
    chat(server, token, root, "hello")
    command = [sys.executable, "-m", "halo_actors", "watch", "--url", server.url, root]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=watcher_env)
    try:
        lines = Lines(process)
        lines.until(r"^» live: " + root)
        chat(server, token, root, "spawn 2 look around")
        lines.until(r"worker2 +report_sent")
        server.stop()
        lines.until(r"^» reconnecting: ")
        server.start()
        lines.until(r"^» live: ")
        chat(server, token, root, "after the restart")
        lines.until(r"says: Done: after the restart")
        lines.until(r" complete +end_turn \(terminal\)")
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(BUDGET) == 0
    server.stop()
    shown = [int(m.group(1)) for line in lines.seen if (m := re.match(r"#(\d+) ", line))]
    expected = [r.seq for r in server.records(root) if describe(r) is not None]
    assert shown == expected


def test_watch_refuses_a_foreign_session_with_one_line(
    server: WebServer, watcher_env: dict[str, str]
) -> None:
    command = [sys.executable, "-m", "halo_actors", "watch", "--url", server.url, "web_bob_x"]
    done = subprocess.run(command, capture_output=True, text=True, env=watcher_env, timeout=BUDGET)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: the server refused (403): session not owned by this token"
    )


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
@needs_sandbox()
def test_the_live_watch_view_fits_an_80_by_24_terminal(
    server: WebServer, watcher_env: dict[str, str]
) -> None:
    token = watcher_env["HALO_ACTORS_TOKEN"]
    root = "web_alice_tmux"
    chat(server, token, root, "spawn 3 count the files")
    command = [sys.executable, "-m", "halo_actors", "watch", "--url", server.url]  # newest
    terminal = Tmux(command, env={"HALO_ACTORS_TOKEN": token})
    try:
        screen = terminal.wait_for("worker1", "worker2", "worker3", "end_turn", "live")
        chat(server, token, root, "run sleep 3")
        busy = terminal.wait_for("in tool", "shell_exec: sleep 3")
        terminal.keys("C-c")
        deadline = time.monotonic() + BUDGET
        while not terminal.exited():
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        terminal.close()
    terminal.save("watch-80x24.txt", busy)
    for shown in (screen, busy):
        assert len(shown) <= HEIGHT and all(len(line) <= WIDTH for line in shown)
    assert any("tree" in line for line in busy[:3])
    assert any("events" in line for line in busy)
