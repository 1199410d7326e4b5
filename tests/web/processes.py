"""Finding a server's shell commands in the process table (``/proc``), and waiting."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from served import WebServer

T = TypeVar("T")
BUDGET = 20.0


def _parent_and_group(pid: int) -> tuple[int, int] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), int(fields[2])


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        found = _parent_and_group(pid)
        if found is None:
            return False
        pid = found[0]
    return False


def sleep_groups(server: WebServer, seconds: str) -> list[int]:
    """Process groups of live ``sleep <seconds>`` processes the server started."""
    assert server.process is not None
    groups = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        found = _parent_and_group(int(name))
        is_sleep = argv[:2] == [b"sleep", seconds.encode()]
        if is_sleep and found is not None and _descends_from(int(name), server.process.pid):
            groups.append(found[1])
    return groups


def wait_for(condition: Callable[[], T]) -> T:
    """Poll what signals nothing (the process table) until it holds; fails after BUDGET s."""
    deadline = time.monotonic() + BUDGET
    while not (value := condition()):
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.05)
    return value
