"""The shell runner: output, limits, and killing the whole process group on abort.

Real processes and the real clock. Group membership is checked twice: through the
module's ``process_group_alive`` and through an independent scan of ``/proc`` here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from halo_actors.core.errors import InvalidInput
from halo_actors.tools.shell import (
    ShellLimits,
    ShellResult,
    kill_process_group,
    process_group_alive,
    run_shell,
)

BUDGET = 5.0  # seconds any single test may take before it is failed
GRACE = 0.3  # small kill_grace so SIGTERM-ignoring commands stay cheap


# --- helpers -----------------------------------------------------------------


def scan_group(pgid: int) -> list[tuple[int, str, str]]:
    """``(pid, comm, state)`` of every /proc entry whose process group is ``pgid``."""
    found: list[tuple[int, str, str]] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        close = raw.rindex(b")")
        comm = raw[raw.index(b"(") + 1 : close].decode(errors="replace")
        state, _ppid, pgrp = raw[close + 2 :].split()[:3]
        if int(pgrp) == pgid:
            found.append((int(name), comm, state.decode()))
    return found


def live_members(pgid: int) -> list[tuple[int, str, str]]:
    """Members that still run: zombies (dead, awaiting a reaper) are left out."""
    return [m for m in scan_group(pgid) if m[2] not in ("Z", "X")]


async def poll_until(condition: Callable[[], bool]) -> None:
    """Poll the process table: nothing signals us when another process changes state."""
    while not condition():  # noqa: ASYNC110 - there is no event to wait on
        await trio.sleep(0.005)


async def wait_for_sleepers(pgids: list[int], count: int) -> int:
    """Wait until the spawned group has ``count`` sleeping ``sleep`` processes."""

    def enough() -> bool:
        members = scan_group(pgids[0]) if pgids else []
        return sum(1 for m in members if m[1:] == ("sleep", "S")) >= count

    await poll_until(enough)
    return pgids[0]


@pytest.fixture
def spawned() -> Iterator[list[int]]:
    """Pgids a test spawned; anything still alive afterwards is SIGKILLed (and fails)."""
    pgids: list[int] = []
    yield pgids
    leftovers = [pgid for pgid in pgids if live_members(pgid)]
    for pgid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    assert not leftovers, f"process groups left running: {leftovers}"


async def run_then_cancel(
    command: str, cwd: Path, spawned: list[int], *, sleepers: int, limits: ShellLimits
) -> tuple[int, trio.CancelScope, float]:
    """Run ``command``, cancel once ``sleepers`` sleeps run; (pgid, scope, seconds to return)."""
    returned = False
    cancelled_at = 0.0

    async def cancel_when_sleeping(scope: trio.CancelScope) -> None:
        nonlocal cancelled_at
        await wait_for_sleepers(spawned, sleepers)
        cancelled_at = trio.current_time()
        scope.cancel()

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_when_sleeping, scope)
            await run_shell(command, cwd, limits, on_spawn=spawned.append)
            returned = True
    assert not returned, "run_shell returned instead of raising Cancelled"
    return spawned[0], scope, trio.current_time() - cancelled_at


def assert_group_gone(pgid: int) -> None:
    assert not process_group_alive(pgid)
    assert live_members(pgid) == []


# --- output and exit codes ---------------------------------------------------


async def test_output_of_stdout_and_stderr_is_captured_with_exit_code(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        result = await run_shell("echo out; echo err >&2", tmp_path)
    assert result == ShellResult(exit_code=0, output="out\nerr\n", truncated=False, timed_out=False)
    assert result.render() == "out\nerr\n[exit code 0]"


async def test_nonzero_exit_code_is_reported(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        result = await run_shell("printf 'no newline'; exit 7", tmp_path)
    assert result.exit_code == 7
    assert result.render() == "no newline\n[exit code 7]"


async def test_death_by_signal_is_named_in_render(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        result = await run_shell("kill -KILL $$", tmp_path)
    assert result.exit_code == -signal.SIGKILL
    assert result.render() == "[exit code -9: killed by SIGKILL]"


async def test_runs_in_cwd_with_given_env(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HALO_PROBE": "yes"}
    with trio.fail_after(BUDGET):
        result = await run_shell('pwd; echo "$HALO_PROBE"', tmp_path, env=env)
    assert result.output == f"{tmp_path}\nyes\n"


async def test_stdin_is_empty(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        result = await run_shell("cat; echo done", tmp_path)
    assert result.output == "done\n"


async def test_output_over_cap_is_truncated_and_the_rest_drained(tmp_path: Path) -> None:
    # 1 MB is far more than a pipe buffer: the child only finishes if we keep reading.
    limits = ShellLimits(output_cap=1000)
    with trio.fail_after(BUDGET):
        result = await run_shell("head -c 1000000 /dev/zero | tr '\\0' a", tmp_path, limits)
    assert result.exit_code == 0
    assert result.truncated
    assert result.output == "a" * 1000
    assert result.render().endswith("\n[output truncated at 1000 bytes]\n[exit code 0]")


async def test_output_exactly_at_cap_is_not_truncated(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        result = await run_shell("printf abcd", tmp_path, ShellLimits(output_cap=4))
    assert (result.output, result.truncated) == ("abcd", False)


# --- timeout -----------------------------------------------------------------


async def test_timeout_kills_the_group_and_says_so(tmp_path: Path, spawned: list[int]) -> None:
    limits = ShellLimits(timeout=0.3, kill_grace=GRACE)
    with trio.fail_after(BUDGET):
        result = await run_shell(
            "echo begun; sleep 60 & sleep 60", tmp_path, limits, on_spawn=spawned.append
        )
    assert result.timed_out
    assert result.exit_code is None
    assert result.output == "begun\n"
    assert result.render() == "begun\n[timed out after 0.3s]"
    assert_group_gone(spawned[0])


# --- cancellation kills the whole group --------------------------------------


async def test_cancel_kills_compound_command_and_its_group(
    tmp_path: Path, spawned: list[int]
) -> None:
    with trio.fail_after(BUDGET):
        pgid, scope, _ = await run_then_cancel(
            "sleep 60 && echo x", tmp_path, spawned, sleepers=1, limits=ShellLimits()
        )
    assert scope.cancelled_caught
    assert_group_gone(pgid)


async def test_spawned_pid_leads_its_own_group_and_session(
    tmp_path: Path, spawned: list[int]
) -> None:
    with trio.fail_after(BUDGET), trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(run_shell, "sleep 60", tmp_path, on_spawn=spawned.append))
            pgid = await wait_for_sleepers(spawned, 1)
            assert os.getpgid(pgid) == pgid
            assert os.getsid(pgid) == pgid
            assert os.getpgid(pgid) != os.getpgrp()
            scope.cancel()
    assert_group_gone(pgid)


async def test_cancel_kills_background_children(tmp_path: Path, spawned: list[int]) -> None:
    with trio.fail_after(BUDGET):
        pgid, scope, _ = await run_then_cancel(
            "sleep 999 & sleep 999", tmp_path, spawned, sleepers=2, limits=ShellLimits()
        )
    assert scope.cancelled_caught
    assert_group_gone(pgid)


async def test_sigterm_ignoring_command_is_sigkilled_after_grace(
    tmp_path: Path, spawned: list[int]
) -> None:
    limits = ShellLimits(kill_grace=GRACE)
    with trio.fail_after(BUDGET):
        pgid, _, took = await run_then_cancel(
            "trap '' TERM; sleep 999", tmp_path, spawned, sleepers=1, limits=limits
        )
    assert took >= GRACE  # SIGTERM alone could not end it: SIGKILL came after the grace
    assert_group_gone(pgid)


async def test_sigterm_ignoring_background_job_is_sigkilled_after_grace(
    tmp_path: Path, spawned: list[int]
) -> None:
    # The leader and the foreground sleep die on SIGTERM; the background job does not.
    limits = ShellLimits(kill_grace=GRACE)
    with trio.fail_after(BUDGET):
        pgid, _, took = await run_then_cancel(
            "(trap '' TERM; sleep 999) & sleep 999", tmp_path, spawned, sleepers=2, limits=limits
        )
    assert took >= GRACE
    assert_group_gone(pgid)


async def test_cancellation_is_reraised_not_swallowed(tmp_path: Path, spawned: list[int]) -> None:
    # run_then_cancel asserts run_shell raised; the scope shows it was our Cancelled.
    with trio.fail_after(BUDGET):
        _, scope, _ = await run_then_cancel(
            "sleep 60", tmp_path, spawned, sleepers=1, limits=ShellLimits()
        )
    assert scope.cancelled_caught


async def test_error_in_on_spawn_kills_the_group_and_propagates(tmp_path: Path) -> None:
    pgids: list[int] = []

    def refuse(pid: int) -> None:
        pgids.append(pid)
        raise RuntimeError("tracker full")

    with trio.fail_after(BUDGET), pytest.raises(RuntimeError, match="tracker full"):
        await run_shell("sleep 60", tmp_path, on_spawn=refuse)
    assert_group_gone(pgids[0])


# --- the helpers the runtime uses for leftover groups -------------------------


async def test_background_job_outlives_normal_exit_until_group_killed(
    tmp_path: Path, spawned: list[int]
) -> None:
    limits = ShellLimits(drain_after_exit=0.05)
    with trio.fail_after(BUDGET):
        result = await run_shell(
            "sleep 60 & echo started", tmp_path, limits, on_spawn=spawned.append
        )
        assert result.render() == "started\n[exit code 0]"
        assert process_group_alive(spawned[0])
        await kill_process_group(spawned[0], GRACE)
    assert_group_gone(spawned[0])


async def test_process_group_alive_counts_a_zombie_as_gone() -> None:
    with trio.fail_after(BUDGET):
        proc = await trio.lowlevel.open_process(["true"], start_new_session=True)
        try:
            await poll_until(lambda: scan_group(proc.pid) == [(proc.pid, "true", "Z")])
            os.killpg(proc.pid, 0)  # the zombie still answers a signal probe ...
            assert not process_group_alive(proc.pid)  # ... but is not alive
        finally:
            await proc.wait()
    assert scan_group(proc.pid) == []


async def test_kill_process_group_of_missing_group_is_a_no_op() -> None:
    with trio.fail_after(BUDGET):
        proc = await trio.lowlevel.open_process(["true"], start_new_session=True)
        await proc.wait()  # reaped: the pgid names no process now
        await kill_process_group(proc.pid, GRACE)
    assert not process_group_alive(proc.pid)


@pytest.mark.parametrize("pgid", [0, 1, -1, os.getpgrp()])
async def test_kill_process_group_refuses_our_own_group(pgid: int) -> None:
    with pytest.raises(InvalidInput, match="refusing"):
        await kill_process_group(pgid, GRACE)


@pytest.fixture
def child_subreaper() -> Iterator[None]:
    """Make this process the reaper of its orphaned descendants for one test."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_child_subreaper = 36
    if libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) != 0:
        pytest.skip("prctl(PR_SET_CHILD_SUBREAPER) is not available")
    try:
        yield
    finally:
        libc.prctl(pr_set_child_subreaper, 0, 0, 0, 0)


async def test_zombies_adopted_by_us_are_reaped(
    tmp_path: Path, spawned: list[int], child_subreaper: None
) -> None:
    with trio.fail_after(BUDGET):
        pgid, _, _ = await run_then_cancel(
            "sleep 999 & sleep 999", tmp_path, spawned, sleepers=2, limits=ShellLimits()
        )
    assert scan_group(pgid) == []  # not even a zombie left


# --- bad input ----------------------------------------------------------------


@pytest.mark.parametrize("command", ["", "   \n\t"])
async def test_empty_command_is_invalid_input(tmp_path: Path, command: str) -> None:
    with pytest.raises(InvalidInput, match="empty"):
        await run_shell(command, tmp_path)


async def test_missing_cwd_is_invalid_input_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with trio.fail_after(BUDGET), pytest.raises(InvalidInput, match="nowhere"):
        await run_shell("true", missing)


async def test_cwd_that_is_a_file_is_invalid_input(tmp_path: Path) -> None:
    a_file = tmp_path / "plain.txt"
    a_file.write_text("x")
    with trio.fail_after(BUDGET), pytest.raises(InvalidInput, match=r"plain\.txt"):
        await run_shell("true", a_file)


@pytest.mark.parametrize(
    "limits",
    [
        {"output_cap": -1},
        {"timeout": 0},
        {"timeout": -1.0},
        {"kill_grace": -0.1},
        {"kill_grace": float("nan")},
        {"drain_after_exit": float("inf")},
    ],
)
def test_nonsense_limits_are_invalid_input(limits: dict[str, float]) -> None:
    with pytest.raises(InvalidInput):
        ShellLimits(**limits)  # type: ignore[arg-type]
