"""The process table as tests read it (``/proc``): zombies count as gone, and so does a
process the kernel is killing (SIGKILL pending: it never runs user code again).

Shared by every test that runs real shell commands and must prove nothing is left.
"""

from __future__ import annotations

import os
from pathlib import Path

SIGKILL_BIT = 1 << (9 - 1)
"""SIGKILL in a ``/proc/<pid>/status`` pending-signal mask."""


def live_group_members(pgid: int) -> list[int]:
    """Pids of processes in group ``pgid`` that still run, from /proc: zombies excluded,
    and processes with a SIGKILL pending (a pid namespace's init that just lost its last
    process is torn down so, by the kernel, an instant after its parent saw it exit)."""
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X") and not _being_killed(name):
            found.append(int(name))
    return found


def _being_killed(pid: str) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # gone meanwhile
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd") and int(value.strip(), 16) & SIGKILL_BIT:
            return True
    return False


def processes_in(directory: Path) -> list[int]:
    """Pids of live (non-zombie) processes whose working directory is ``directory``."""
    target = directory.resolve()
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{name}/cwd"))
            raw = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        state = raw[raw.rindex(b")") + 2 :].split()[0]
        if cwd == target and state not in (b"Z", b"X"):
            found.append(int(name))
    return found
