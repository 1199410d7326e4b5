"""A process in the workspace races the file gate: swaps a checked directory for a symlink.

A sandboxed command can loop for as long as its turn runs, renaming a directory of the
workspace back and forth with a symlink to the outside. The file tools and
``/api/web/file`` check a path, then open it: the open must never land outside
(``tools/beneath.py``). A real racing process (``sh``, ``mv -T``), the real clock.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from halo_actors.core.errors import WorkspaceError
from halo_actors.tools.files import Workspace

SECRET = "tokens-secret-5d1e"
RACE_SECONDS = 1.5

# A write may create ``d`` (parents are made) while the swap has it absent; no rename can
# move a non-empty directory over ``real`` or ``link``, so the loop removes that copy.
SWAPPER = """
while :; do
  [ -d real ] && [ -d d ] && [ ! -L d ] && rm -rf d
  mv -T real d 2>/dev/null; mv -T d real 2>/dev/null
  mv -T link d 2>/dev/null; mv -T d link 2>/dev/null
done
"""


@pytest.fixture
def racing(tmp_path: Path) -> Iterator[Workspace]:
    """A workspace whose ``d`` flips between a real directory and a symlink outside."""
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    (ws / "real" / "f").write_text("inside\n")
    outside = tmp_path / "state"
    outside.mkdir()
    (outside / "f").write_text(f"{SECRET}\n")
    os.symlink(outside, ws / "link")
    swapper = subprocess.Popen(["sh", "-c", SWAPPER], cwd=ws)
    try:
        yield Workspace(ws)
    finally:
        swapper.kill()
        swapper.wait()
    assert (outside / "f").read_text() == f"{SECRET}\n", "the outside file was written"


def _hammer(ws: Workspace) -> dict[str, int]:
    """Read, grep, serve and write ``d/f`` for a while; count what came back."""
    seen = {"inside": 0, "refused": 0, "leaked": 0}
    end = time.monotonic() + RACE_SECONDS
    while time.monotonic() < end:
        for attempt in (_read, _grep, _serve, _write):
            try:
                text = attempt(ws)
            except WorkspaceError:
                seen["refused"] += 1
                continue
            if SECRET in text:
                seen["leaked"] += 1
            elif "inside" in text:
                seen["inside"] += 1
    return seen


def _read(ws: Workspace) -> str:
    return ws.read_text("d/f")


def _grep(ws: Workspace) -> str:
    return "\n".join(ws.grep("secret|inside", "d"))


def _serve(ws: Workspace) -> str:
    fd, _ = ws.open_for_serving("d/f")
    with os.fdopen(fd, "rb") as f:
        return f.read().decode()


def _write(ws: Workspace) -> str:
    ws.write_text("d/f", "inside\n")
    return "inside"


async def test_a_directory_swapped_for_a_symlink_never_leads_the_gate_outside(
    racing: Workspace,
) -> None:
    """Rule: following a symlink the command created inside the workspace to the
    outside fails through the file tools and /api/web/file, even racing the check."""
    with trio.fail_after(30):
        seen = await trio.to_thread.run_sync(_hammer, racing)
    assert seen["leaked"] == 0, seen
    assert seen["inside"] > 0 and seen["refused"] > 0, seen  # the race really ran both ways
