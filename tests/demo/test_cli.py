"""The ``demo`` subcommand as a user runs it: a subprocess, plain output off a terminal."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import trio

from halo_actors.demo.live import LiveView
from halo_actors.demo.scenarios import SCENARIOS
from halo_actors.demo.tour import find, tour

DEMO = (sys.executable, "-m", "halo_actors", "demo")


async def _demo(*args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(
            [*DEMO, *args], capture_stdout=True, capture_stderr=True, check=False
        )


async def test_list_names_every_scenario() -> None:
    done = await _demo("--list")
    assert done.returncode == 0
    listed = [line.split()[0] for line in done.stdout.decode().splitlines()]
    assert listed == [s.name for s in SCENARIOS]
    assert listed == [
        "fan-out",
        "soft-interrupt",
        "hard-interrupt",
        "stop-archive",
        "gates",
        "crash-replay",
    ]


async def test_an_unknown_scenario_is_a_clear_error() -> None:
    done = await _demo("no-such-thing")
    assert done.returncode == 2
    assert b"unknown scenario no-such-thing" in done.stderr
    assert b"Traceback" not in done.stderr


async def test_off_a_terminal_the_demo_prints_plain_lines(tmp_path: Path) -> None:
    done = await _demo("gates", "--speed", "0.5", "--workspace", str(tmp_path))
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "\x1b[" not in out  # no terminal control codes
    assert "══ gates ·" in out and "── gates: what this showed (3/3 checks passed)" in out
    assert "read more: docs/design/gates.md" in out
    assert "✓ no process left behind (0 found)" in out
    assert (tmp_path / "gates" / ".halo" / "events.db").exists()  # the workspace is kept


async def test_the_live_view_draws_the_tree_and_the_summary(tmp_path: Path) -> None:
    out = io.StringIO()
    with trio.fail_after(30):
        ok = await tour(find(["gates"]), tmp_path, LiveView(out), 0.5)
    text = out.getvalue()
    assert ok
    assert "gates · session tree" in text and "prober" in text
    assert "[interrupted by user]" not in text  # gates cut nothing
    assert "── gates: what this showed" in text


def test_every_scenario_points_to_docs_that_exist() -> None:
    repo = Path(__file__).resolve().parents[2]
    for scenario in SCENARIOS:
        assert scenario.shown and scenario.docs
        for ref in scenario.docs:
            assert (repo / ref.split()[0]).is_file(), f"{scenario.name}: {ref}"
    demo_doc = (repo / "docs" / "demo.md").read_text()
    assert all(f"### {s.name}" in demo_doc for s in SCENARIOS)
