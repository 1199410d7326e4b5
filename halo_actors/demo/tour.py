"""The demo tour: the named scenarios, played one after the other on fresh workspaces.

``run_demo`` is what ``python -m halo_actors demo`` calls. Each scenario gets its
own workspace directory (``<root>/<name>``, under a temporary root unless one is
given) and so its own SQLite log. After the last scenario the tour checks that
no process it started is still alive (any process whose working directory lies
under the root). The exit status is 0 only when every check passed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TextIO

import trio

from .scenario import Check, Scenario
from .scenarios import SCENARIOS
from .stage import DemoStuck, Stage, seed_workspace
from .view import JsonView, PlainView, View

Mode = Literal["live", "plain", "json"]
TICK = 0.1
"""Seconds between redraws of a live view."""


def find(names: Sequence[str]) -> list[Scenario]:
    """The named scenarios in tour order (all of them for no name); unknown names raise."""
    by_name = {s.name: s for s in SCENARIOS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise KeyError(f"unknown scenario {', '.join(unknown)}; try: {', '.join(by_name)}")
    return [s for s in SCENARIOS if not names or s.name in names]


def list_scenarios(out: TextIO) -> None:
    width = max(len(s.name) for s in SCENARIOS)
    for scenario in SCENARIOS:
        out.write(f"{scenario.name:<{width}}  {scenario.title}\n")


async def play(scenario: Scenario, root: Path, view: View, speed: float) -> list[Check]:
    """Play one scenario on ``root/<name>``; a stuck wait fails it instead of hanging."""
    workspace = root / scenario.name
    await trio.to_thread.run_sync(_prepare, workspace)
    stage = Stage(scenario, workspace, view, speed)
    view.begin(scenario)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_redraw, view)
            with trio.fail_after(scenario.budget * max(speed, 1.0)):
                await scenario.play(stage)
            nursery.cancel_scope.cancel()
    except* DemoStuck as stuck:
        for exc in _leaves(stuck):
            stage.record_check(f"stuck: {exc}", False)
    except* trio.TooSlowError:
        stage.record_check(f"stuck: the scenario took over {scenario.budget:g} s", False)
    view.finish(scenario, stage.checks)
    return stage.checks


def _prepare(workspace: Path) -> None:
    """A fresh log (a previous run's is removed) and the sample project's files."""
    shutil.rmtree(workspace / ".halo", ignore_errors=True)
    seed_workspace(workspace)


def _leaves(group: BaseExceptionGroup[DemoStuck]) -> list[DemoStuck]:
    """The exceptions of a (possibly nested) group, flattened."""
    found: list[DemoStuck] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


async def _redraw(view: View) -> None:
    while True:
        view.tick()
        await trio.sleep(TICK)


def leftover_processes(root: Path) -> list[int]:
    """Pids of live processes whose working directory lies under ``root`` (from /proc)."""
    root = root.resolve()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{name}/cwd"))
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        state = stat[stat.rfind(b")") + 2 :][:1]
        if state not in (b"Z", b"X") and cwd.is_relative_to(root):
            found.append(int(name))
    return found


async def tour(scenarios: Sequence[Scenario], root: Path, view: View, speed: float) -> bool:
    """Play ``scenarios`` in order; True when every check passed."""
    checks: list[Check] = []
    for scenario in scenarios:
        checks += await play(scenario, root, view, speed)
    left = leftover_processes(root)
    final = Check(f"no process left behind ({len(left)} found)", not left)
    view.check(final)
    checks.append(final)
    failed = [c.label for c in checks if not c.ok]
    view.note(
        f"tour done: {len(checks) - len(failed)}/{len(checks)} checks passed"
        + (f"; FAILED: {'; '.join(failed)}" if failed else "")
    )
    return not failed


def make_view(mode: Mode, out: TextIO) -> View:
    if mode == "json":
        return JsonView(out)
    if mode == "live":
        from .live import LiveView

        return LiveView(out)
    return PlainView(out)


def run_demo(
    names: Sequence[str] = (),
    *,
    workspace: str | None = None,
    mode: Mode = "plain",
    speed: float = 1.0,
    out: TextIO = sys.stdout,
) -> int:
    """Play the named scenarios (the whole tour for none); the process exit status."""
    try:
        chosen = find(names)
    except KeyError as exc:
        sys.stderr.write(f"{exc.args[0]}\n")
        return 2
    view = make_view(mode, out)
    ok = closed = stopped = False
    try:
        ok = _run_tour(chosen, workspace, view, speed)
    except* BrokenPipeError:  # the reader went away (`demo --json | head`): stop quietly
        closed = True
    except* KeyboardInterrupt:  # Ctrl-C: every run was cancelled, every command killed
        stopped = True
    finally:
        if closed:
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        view.close()
    return 130 if stopped else 0 if ok else 1


def _run_tour(
    scenarios: Sequence[Scenario], workspace: str | None, view: View, speed: float
) -> bool:
    if workspace is not None:
        return trio.run(tour, scenarios, Path(workspace).resolve(), view, speed)
    with tempfile.TemporaryDirectory(prefix="halo-demo-") as tmp:
        return trio.run(tour, scenarios, Path(tmp).resolve(), view, speed)
