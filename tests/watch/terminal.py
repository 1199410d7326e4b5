"""A real 80×24 terminal for the CLI tests: tmux on a private socket, read with capture-pane.

Each :class:`Tmux` runs its own tmux server (``-L <unique name>``), so a test never
touches another tmux session, and :meth:`Tmux.close` kills that server (and with it
the program in the pane). Waiting polls the screen: a terminal signals nothing.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

WIDTH, HEIGHT = 80, 24
ARTIFACTS = Path(os.environ.get("HALO_ARTIFACTS", Path(__file__).parents[2] / ".artifacts"))
"""Where screens are saved for people to look at (git-ignored)."""
BUDGET = 30.0
MISSING = None if shutil.which("tmux") else "terminal tests skipped: tmux is not installed"


class Tmux:
    def __init__(self, command: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.socket = f"halo-test-{os.getpid()}-{time.monotonic_ns()}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        line = f"{exports} exec {shlex.join(command)}" if exports else shlex.join(command)
        size = ("-x", str(WIDTH), "-y", str(HEIGHT))
        self._tmux("new-session", "-d", "-s", "t", *size, "sleep 600")
        self._tmux("set-option", "-t", "t", "remain-on-exit", "on")  # keep its last screen
        self._tmux("respawn-pane", "-k", "-t", "t", line)

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def screen(self) -> list[str]:
        """The visible rows; a line the terminal wrapped comes back whole (``-J``), so a
        line wider than the terminal shows as one long line."""
        return self._tmux("capture-pane", "-p", "-J", "-t", "t").splitlines()

    def wait_for(self, *texts: str) -> list[str]:
        """The screen, once it shows every one of ``texts``; fails after BUDGET s."""
        deadline = time.monotonic() + BUDGET
        while True:
            screen = self.screen()
            shown = "\n".join(screen)
            if all(t in shown for t in texts):
                return screen
            assert time.monotonic() < deadline, "the screen never showed it:\n" + shown
            time.sleep(0.1)

    def save(self, name: str, screen: list[str]) -> None:
        (ARTIFACTS / "terminal").mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "terminal" / name).write_text("\n".join(screen) + "\n")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "t", *keys)

    def exited(self) -> bool:
        return self._tmux("display-message", "-p", "-t", "t", "#{pane_dead}").strip() == "1"

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)
