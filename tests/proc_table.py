"""The process table as tests read it (``/proc``): zombies count as gone.

Shared by every test that runs real shell commands and must prove nothing is left.
"""

from __future__ import annotations

import os
from pathlib import Path


def live_group_members(pgid: int) -> list[int]:
    """Pids of processes in group ``pgid`` that still run (zombies excluded), from /proc."""
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            found.append(int(name))
    return found


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
