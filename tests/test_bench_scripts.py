"""Every script under ``scripts/`` starts: its imports resolve against the code as it is
now (a benchmark that no longer imports is found here, not in the next benchmark run).

A program runs for real with ``--help``; a helper module (no ``__main__`` block) is
imported. One whose peer library (the ``bench`` extra: autogen-core, LangGraph) is not
installed is skipped, saying so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

SCRIPTS = sorted((Path(__file__).parent.parent / "scripts").glob("*.py"))
IS_PROGRAM = {script: 'if __name__ == "__main__":' in script.read_text() for script in SCRIPTS}
MISSING_EXTRA = (
    "No module named 'autogen_core",
    "No module named 'langgraph",
    "pip install -e '.[bench]'",  # the scripts' own message when a peer is missing
)
BUDGET = 60.0


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
async def test_a_script_starts_and_prints_its_usage(script: Path) -> None:
    with trio.fail_after(BUDGET):
        if IS_PROGRAM[script]:
            command = [sys.executable, str(script), "--help"]
        else:
            command = [sys.executable, "-c", f"import {script.stem}"]
        done = await trio.run_process(
            command,
            cwd=script.parent,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    err = done.stderr.decode()
    if done.returncode != 0 and any(m in err for m in MISSING_EXTRA):
        pytest.skip(f"{script.name} needs the bench extra (pip install -e '.[bench]')")
    assert done.returncode == 0, err
    if command[-1] == "--help":
        assert b"usage:" in done.stdout, done.stdout
