"""Benchmark: how long a hard interrupt of a running shell command takes.

For ``--runs`` runs per case, start ``run_shell`` in a nursery, wait until the command
is spawned (``on_spawn``) and its ``sleep`` is asleep, cancel, and time from the cancel
to ``run_shell`` having raised (its whole process group gone). Cases:

- ``term``: ``sleep 60``, which dies on SIGTERM;
- ``ignore``: ``trap "" TERM; sleep 60``, which only dies on SIGKILL after the grace;
- ``baseline``: the same cancel of ``trio.run_process(["sleep", "60"])`` with trio's own
  policy (SIGTERM to the one process), measured in the same run for comparison;
- ``sandbox_term`` / ``sandbox_ignore``: ``term`` and ``ignore`` run in the workspace
  sandbox (bubblewrap; ``tools/sandbox.py``), timed to the end of the sandbox's own
  cleanup (the pids cgroup of a root server removed). Skipped, with a line saying why,
  where the sandbox cannot start.

Human lines first; the last line is one JSON object.

    .venv/bin/python scripts/bench_interrupt.py [--runs 200] [--grace 0.2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from collections.abc import Awaitable, Callable

import trio

from halo_actors.tools.sandbox import Sandbox, SandboxUnavailable, ShellConfinement
from halo_actors.tools.shell import ShellLimits, process_group_alive, run_shell

Started = Callable[[int], None]
Runner = Callable[[Started], Awaitable[object]]


def _sleeping_in_group(pgid: int) -> bool:
    """True once a ``sleep`` process of group ``pgid`` is in state S (asleep)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        close = raw.rindex(b")")
        comm = raw[raw.index(b"(") + 1 : close]
        state, _ppid, pgrp = raw[close + 2 :].split()[:3]
        if int(pgrp) == pgid and comm == b"sleep" and state == b"S":
            return True
    return False


async def _measure_once(runner: Runner) -> tuple[float, int]:
    """Cancel ``runner`` once its sleep is asleep: (seconds from cancel to return, pgid)."""
    pgids: list[int] = []
    cancelled_at = math.nan

    async def cancel_when_asleep(scope: trio.CancelScope) -> None:
        nonlocal cancelled_at
        while not (pgids and _sleeping_in_group(pgids[0])):  # noqa: ASYNC110 - polls /proc
            await trio.sleep(0.002)
        cancelled_at = time.perf_counter()
        scope.cancel()

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_when_asleep, scope)
            try:
                await runner(pgids.append)
            finally:
                returned_at = time.perf_counter()
    if not scope.cancelled_caught:
        raise RuntimeError("the command ended before it was cancelled")
    return returned_at - cancelled_at, pgids[0]


def _shell_runner(command: str, limits: ShellLimits, cwd: str) -> Runner:
    async def run(started: Started) -> object:
        return await run_shell(command, cwd, limits, on_spawn=started)

    return run


def _sandboxed_runner(command: str, limits: ShellLimits, cwd: str, sandbox: Sandbox) -> Runner:
    policy = ShellConfinement(sandbox).policy(cwd)

    async def run(started: Started) -> object:
        async with sandbox.confine(policy) as wrap:
            return await run_shell(command, cwd, limits, on_spawn=started, wrap=wrap)

    return run


def _trio_runner() -> Runner:
    async def run(started: Started) -> object:
        # Its own group only so the poller can find it; trio signals the one process.
        async def spawn_then_report(task_status: trio.TaskStatus[trio.Process]) -> None:
            await trio.run_process(["sleep", "60"], task_status=task_status, process_group=0)

        async with trio.open_nursery() as nursery:
            proc: trio.Process = await nursery.start(spawn_then_report)
            started(proc.pid)
        return None

    return run


async def _measure(name: str, runner: Runner, runs: int) -> tuple[list[float], int]:
    """``runs`` timings in ms, plus how many groups were still alive after a return."""
    timings: list[float] = []
    leftovers = 0
    for _ in range(runs):
        with trio.fail_after(30):
            seconds, pgid = await _measure_once(runner)
        timings.append(seconds * 1000)
        leftovers += process_group_alive(pgid)
    print(
        f"{name:>8}: {runs} runs  p50 {_pct(timings, 50):7.2f} ms  "
        f"p99 {_pct(timings, 99):7.2f} ms  max {max(timings):7.2f} ms  leftovers {leftovers}"
    )
    return timings, leftovers


def _pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


async def _main(runs: int, grace: float) -> dict[str, float | int | str]:
    limits = ShellLimits(kill_grace=grace)
    ignoring = "trap '' TERM; sleep 60"
    with tempfile.TemporaryDirectory() as cwd:
        base, base_left = await _measure("baseline", _trio_runner(), runs)
        term, term_left = await _measure("term", _shell_runner("sleep 60", limits, cwd), runs)
        ignore, ignore_left = await _measure("ignore", _shell_runner(ignoring, limits, cwd), runs)
        sandbox = Sandbox()
        try:
            await sandbox.ensure_ready(cwd)
        except SandboxUnavailable as exc:
            print(f"sandbox cases skipped: {exc}")
            boxed: dict[str, list[float]] = {}
            boxed_left = 0
        else:
            sb_term, left_a = await _measure(
                "sb_term", _sandboxed_runner("sleep 60", limits, cwd, sandbox), runs
            )
            sb_ignore, left_b = await _measure(
                "sb_ignore", _sandboxed_runner(ignoring, limits, cwd, sandbox), runs
            )
            boxed, boxed_left = {"term": sb_term, "ignore": sb_ignore}, left_a + left_b
    grace_ms = grace * 1000
    out: dict[str, float | int | str] = {
        "runs": runs,
        "grace_ms": grace_ms,
        "term_p50_ms": round(_pct(term, 50), 3),
        "term_p99_ms": round(_pct(term, 99), 3),
        "term_max_ms": round(max(term), 3),
        "ignore_p50_ms": round(_pct(ignore, 50), 3),
        "ignore_p99_ms": round(_pct(ignore, 99), 3),
        "ignore_p50_over_grace_ms": round(_pct(ignore, 50) - grace_ms, 3),
        "ignore_p99_over_grace_ms": round(_pct(ignore, 99) - grace_ms, 3),
        "baseline_trio_run_process_p50_ms": round(_pct(base, 50), 3),
        "baseline_trio_run_process_p99_ms": round(_pct(base, 99), 3),
        "leftover_groups": term_left + ignore_left + base_left + boxed_left,
    }
    if boxed:
        sb_term, sb_ignore = boxed["term"], boxed["ignore"]
        out |= {
            "sandbox_term_p50_ms": round(_pct(sb_term, 50), 3),
            "sandbox_term_p99_ms": round(_pct(sb_term, 99), 3),
            "sandbox_term_max_ms": round(max(sb_term), 3),
            "sandbox_term_p99_over_term_p99_ms": round(_pct(sb_term, 99) - _pct(term, 99), 3),
            "sandbox_ignore_p50_over_grace_ms": round(_pct(sb_ignore, 50) - grace_ms, 3),
            "sandbox_ignore_p99_over_grace_ms": round(_pct(sb_ignore, 99) - grace_ms, 3),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=200, help="runs per case (default 200)")
    parser.add_argument(
        "--grace", type=float, default=0.2, help="kill_grace in seconds (default 0.2)"
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(json.dumps(trio.run(_main, args.runs, args.grace)))


if __name__ == "__main__":
    main()
