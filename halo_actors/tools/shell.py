"""Run one shell command as its own process group, and kill that whole group on abort.

The low-level, trio-only runner behind the ``shell_exec`` tool (ARCHITECTURE rule 7:
shell commands run as process-group leaders). No tool schema lives here.

Invariants:

- ``run_shell`` runs ``sh -c <command>`` in ``cwd`` as the leader of a new session,
  so its pid is also its process-group id (``pgid``). ``on_spawn(pgid)`` is called
  before the first checkpoint after the spawn, so a caller can always track the group;
  when it returns an awaitable (logging the group, say), that is awaited under the same
  cleanup as the command, so a cancel during it still kills the group.
- stdin is ``/dev/null``; stdout and stderr share one pipe. The first ``output_cap``
  bytes are kept; the rest is read and dropped, so the child never blocks on a full pipe.
- Abort (a cancel scope, the timeout, or any error in here) signals the **whole group**:
  SIGTERM (plus SIGCONT, so a stopped member can act on it), then SIGKILL after
  ``kill_grace`` if any member still lives. ``run_shell`` returns or raises only once
  every member has exited. Liveness is read from the process table (``/proc``), where a
  zombie counts as gone; ``os.killpg(pgid, 0)`` is not enough because zombies answer it.
- On abort the leader (our child) is reaped only after the group is gone, so its pid,
  and with it the pgid, cannot be recycled while we are still signalling it.
- Cleanup runs under a shielded cancel scope bounded by ``kill_grace`` plus
  ``_CLEANUP_MARGIN``; ``trio.Cancelled`` (or any other error) is re-raised afterwards.
- Normal exit: once the leader exits, the pipe is drained until EOF for at most
  ``drain_after_exit`` seconds. Background jobs that outlive the leader are left running
  (the soft path does nothing special); the caller can end them with
  ``kill_process_group(pgid, grace)``.

Linux only: the process table is read from ``/proc/<pid>/stat`` (in memory, so it is
read inline rather than in a worker thread).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import trio

from halo_actors.core.errors import InvalidInput
from halo_actors.core.logger import get_logger

__all__ = [
    "ShellLimits",
    "ShellResult",
    "kill_process_group",
    "process_group_alive",
    "run_shell",
    "wait_process_group_gone",
]

log = get_logger(__name__)

_POLL_FIRST = 0.001  # first process-table poll interval; doubles up to _POLL_MAX
_POLL_MAX = 0.020
_CLEANUP_MARGIN = 1.0  # seconds allowed after SIGKILL for the kernel to finish the group
_GONE_STATES = frozenset("ZXx")  # zombie or dead: no longer runs, only awaits a reaper


@dataclass(frozen=True)
class ShellLimits:
    """Bounds for one command; every field is checked when the record is built."""

    output_cap: int = 64_000  # bytes of combined stdout+stderr kept (>= 0)
    timeout: float | None = None  # seconds until the group is killed; None = never
    kill_grace: float = 2.0  # seconds between SIGTERM and SIGKILL (>= 0)
    drain_after_exit: float = 0.5  # seconds to wait for EOF once the leader exited

    def __post_init__(self) -> None:
        if self.output_cap < 0:
            raise InvalidInput(f"output_cap must be >= 0, got {self.output_cap}")
        if self.timeout is not None and not self.timeout > 0:
            raise InvalidInput(f"timeout must be > 0 seconds or None, got {self.timeout}")
        if not (math.isfinite(self.kill_grace) and self.kill_grace >= 0):
            raise InvalidInput(f"kill_grace must be a finite number >= 0, got {self.kill_grace}")
        if not (math.isfinite(self.drain_after_exit) and self.drain_after_exit >= 0):
            raise InvalidInput(f"drain_after_exit must be >= 0, got {self.drain_after_exit}")


@dataclass(frozen=True)
class ShellResult:
    """What one command produced; ``render()`` is the text a model sees."""

    exit_code: int | None  # None when our timeout killed it; negative = killed by that signal
    output: str  # combined stdout+stderr, utf-8 decoded with errors="replace"
    truncated: bool  # the command wrote more than limits.output_cap bytes
    timed_out: bool
    limits: ShellLimits = ShellLimits()  # the limits it ran under (render quotes them)

    def render(self) -> str:
        """The output, then one bracketed line per fact: truncation, timeout, exit code."""
        notes: list[str] = []
        if self.truncated:
            notes.append(f"[output truncated at {self.limits.output_cap} bytes]")
        if self.timed_out:
            after = "" if self.limits.timeout is None else f" after {self.limits.timeout:g}s"
            notes.append(f"[timed out{after}]")
        if self.exit_code is not None:
            notes.append(_describe_exit(self.exit_code))
        body = self.output
        if body and not body.endswith("\n"):
            body += "\n"
        return body + "\n".join(notes)


def _describe_exit(code: int) -> str:
    if code >= 0:
        return f"[exit code {code}]"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"[exit code {code}: killed by {name}]"


async def run_shell(
    command: str,
    cwd: str | os.PathLike[str],
    limits: ShellLimits = ShellLimits(),
    *,
    env: Mapping[str, str] | None = None,
    on_spawn: Callable[[int], Awaitable[None] | None] | None = None,
    wrap: Callable[[list[str]], list[str]] | None = None,
) -> ShellResult:
    """Run ``sh -c command`` in ``cwd`` as a new process group and collect its output.

    ``wrap`` turns the ``sh -c`` command line into the one actually run (the sandbox's
    launcher, ``sandbox.py``); what it runs stays in the group and is killed with it.
    Raises ``InvalidInput`` for an empty command or a working directory that cannot be
    entered. Cancellation kills the whole group (see the module docstring) and is then
    re-raised; the timeout does the same but returns a result with ``timed_out=True``.
    """
    argv = _checked_command(command)
    proc = await _spawn(wrap(argv) if wrap is not None else argv, cwd, env)
    # No checkpoint between the spawn and this try: a cancel landing now still kills.
    output = _CappedOutput(limits.output_cap)
    leader_exited = False
    try:
        if on_spawn is not None:
            pending = on_spawn(proc.pid)
            if pending is not None:
                await pending
        async with trio.open_nursery() as nursery:
            assert proc.stdout is not None  # we asked for a pipe
            nursery.start_soon(_pump, proc.stdout, output)
            leader_exited = await _wait_leader_then_drain(proc, output, limits)
            nursery.cancel_scope.cancel()  # stop reading; our end of the pipe closes
    finally:
        if not leader_exited:
            await _end_group(proc, limits.kill_grace)
    # Reaching here without the leader's exit means the timeout fired (errors raised).
    return ShellResult(
        exit_code=proc.returncode if leader_exited else None,
        output=output.text(),
        truncated=output.truncated,
        timed_out=not leader_exited,
        limits=limits,
    )


def _checked_command(command: str) -> list[str]:
    if not command.strip():
        raise InvalidInput("shell command is empty")
    if "\x00" in command:
        raise InvalidInput("shell command contains a NUL byte")
    return ["sh", "-c", command]


async def _spawn(
    argv: list[str], cwd: str | os.PathLike[str], env: Mapping[str, str] | None
) -> trio.Process:
    where = os.fspath(cwd)
    try:
        return await trio.lowlevel.open_process(
            argv,
            cwd=where,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        # The child's chdir failed: subprocess names the cwd as the failing file.
        if exc.filename == where:
            reason = exc.strerror or type(exc).__name__
            raise InvalidInput(f"cannot run in working directory {where!r}: {reason}") from exc
        raise


class _CappedOutput:
    """The first ``cap`` bytes of a stream; later bytes are only counted, then dropped."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._kept = bytearray()  # never longer than _cap
        self._seen = 0  # every byte received, kept or not
        self.eof = trio.Event()  # set once the writer side of the pipe is fully closed

    def feed(self, chunk: bytes | bytearray) -> None:
        room = self._cap - len(self._kept)
        if room > 0:
            self._kept += chunk[:room]
        self._seen += len(chunk)

    @property
    def truncated(self) -> bool:
        return self._seen > self._cap

    def text(self) -> str:
        return self._kept.decode("utf-8", errors="replace")


async def _pump(stream: trio.abc.ReceiveStream, output: _CappedOutput) -> None:
    async with stream:
        async for chunk in stream:
            output.feed(chunk)
    output.eof.set()


async def _wait_leader_then_drain(
    proc: trio.Process, output: _CappedOutput, limits: ShellLimits
) -> bool:
    """Wait for the leader, then for EOF (bounded); False when the timeout came first."""
    deadline = math.inf if limits.timeout is None else trio.current_time() + limits.timeout
    with trio.move_on_at(deadline):
        await proc.wait()
    if proc.returncode is None:
        return False
    # Background jobs may hold the pipe open for ever: wait for EOF only briefly.
    with trio.move_on_at(min(deadline, trio.current_time() + limits.drain_after_exit)):
        await output.eof.wait()
    return True


async def _end_group(proc: trio.Process, grace: float) -> None:
    """Kill the leader's whole group, then reap the leader; shielded and bounded."""
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + grace + _CLEANUP_MARGIN
        await kill_process_group(proc.pid, grace)
        await proc.wait()
    if scope.cancelled_caught:
        log.warning("shell_group_outlived_kill", pgid=proc.pid, grace=grace)


async def kill_process_group(pgid: int, grace: float) -> None:
    """SIGTERM group ``pgid``, wait up to ``grace`` s, SIGKILL what is left, wait until gone.

    Not shielded and not bounded after SIGKILL: callers that clean up wrap it in a
    shielded scope with a deadline (``run_shell`` does). A group that no longer exists
    is a no-op; our own group (or a pgid of 0 or 1, which ``killpg`` reads as "ours" or
    init) is refused with ``InvalidInput``.
    """
    if pgid <= 1 or pgid == os.getpgrp():
        raise InvalidInput(f"refusing to kill process group {pgid}: not a command's group")
    if not _signal_group(pgid, signal.SIGTERM):
        await trio.lowlevel.checkpoint()
        return
    _signal_group(pgid, signal.SIGCONT)  # a stopped member acts on SIGTERM only once it runs
    with trio.move_on_after(grace) as polite:
        await wait_process_group_gone(pgid)
    if not polite.cancelled_caught:
        return
    _signal_group(pgid, signal.SIGKILL)
    await wait_process_group_gone(pgid)


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to the group; False when the group has no member at all."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Every member runs as another user (say, under sudo): we cannot signal it.
        log.warning("shell_group_not_signalled", pgid=pgid, signal=sig.name)
    return True


async def wait_process_group_gone(pgid: int) -> None:
    """Return once no member of group ``pgid`` is alive (zombies count as gone).

    Polls every 1 ms, backing off to 20 ms. A poll re-reads only the members that
    were alive at the last full scan of the process table; only when all of those are
    gone is the table scanned again, to catch anything they forked into the group, and
    only a full scan with no live member ends the wait. Zombies of the group that we
    were made parent of (we are a subreaper or PID 1) are reaped on the way; the leader
    is left to the ``trio.Process`` that owns it.
    """
    interval = _POLL_FIRST
    watched: list[int] = []  # live members at the last full scan
    while True:
        if not any(_alive_in_group(pid, pgid) for pid in watched):
            members = _group_members(pgid)
            _reap_adopted_zombies(pgid, members)
            watched = [m.pid for m in members if m.state not in _GONE_STATES]
            if not watched:
                break
        await trio.sleep(interval)
        interval = min(interval * 2, _POLL_MAX)
    # Every member is dead, so every orphan has been reparented for good. A zombie the
    # scan saw under a parent of the group may have moved to us since: reap once more.
    pids = {m.pid for m in members}
    if any(m.ppid in pids for m in members):
        _reap_adopted_zombies(pgid, _group_members(pgid))
    await trio.lowlevel.checkpoint()


def process_group_alive(pgid: int) -> bool:
    """True while some member of group ``pgid`` is alive (a zombie counts as gone)."""
    return any(m.state not in _GONE_STATES for m in _group_members(pgid))


class _Member(NamedTuple):
    pid: int
    ppid: int
    pgrp: int
    state: str  # one letter of /proc/<pid>/stat: R, S, D, T, Z (zombie), X (dead), ...


def _group_members(pgid: int) -> list[_Member]:
    """Every process (zombies included) whose process group is ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []  # not even a zombie left: no need to scan
    except PermissionError:
        pass
    try:
        names = os.listdir("/proc")
    except OSError:  # no procfs: trust killpg, which also counts zombies
        return [_Member(pgid, 0, pgid, "?")]
    stats = (_read_stat(int(name)) for name in names if name.isdigit())
    return [m for m in stats if m is not None and m.pgrp == pgid]


def _alive_in_group(pid: int, pgid: int) -> bool:
    member = _read_stat(pid)
    return member is not None and member.pgrp == pgid and member.state not in _GONE_STATES


def _read_stat(pid: int) -> _Member | None:
    """The process's entry in ``/proc/<pid>/stat``; None if it has vanished."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)  # os.open: a scan reads many of these
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None
    # "pid (comm) state ppid pgrp ...": comm may hold spaces or ")", so split after the last ")".
    fields = raw[raw.rfind(b")") + 2 :].split(maxsplit=3)
    if len(fields) < 3:
        return None
    return _Member(pid, int(fields[1]), int(fields[2]), fields[0].decode("ascii", "replace"))


def _reap_adopted_zombies(pgid: int, members: list[_Member]) -> None:
    me = os.getpid()
    for m in members:
        if m.state == "Z" and m.ppid == me and m.pid != pgid:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(m.pid, os.WNOHANG)
