"""Command process groups a crashed runtime left running: naming them, and ending them.

When a shell command starts, its session logs :class:`CommandStarted`: the group id
(the leader's pid) with the leader's identity, its start time in clock ticks since
boot (field 22 of ``/proc/<pid>/stat``) and the kernel's boot id. A pid is a number
the kernel recycles; (boot id, pid, start time) names one process for ever.

On recovery every group recorded in a turn the crash left open is killed (SIGTERM,
then SIGKILL after the grace, the whole group) when its leader is still there, still
leads its group and has the recorded identity. Anything else is not provably ours
and is left alone: the leader gone (a finished command; background jobs it left
behind are left running, as the soft path leaves them), the pid reused by another
process, another boot, or no identity recorded.

Invariants:
- a pid is never signalled on its number alone: only after its identity matched;
- our own process group is never signalled (``kill_process_group`` refuses it).

Linux only: elsewhere no identity is recorded (``started`` 0) and nothing is killed.
See ``docs/design/actors.md`` (Recovery).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from typing import NamedTuple

import trio

from ..core.events import CommandStarted
from ..core.logger import get_logger
from ..tools.shell import kill_process_group

log = get_logger("halo_actors.orphans")

_STARTTIME = 19
"""Index of ``starttime`` (field 22) among the fields after ``(comm)`` in ``stat``."""


class Identity(NamedTuple):
    started: int
    """Start time, clock ticks since boot."""
    boot_id: str
    pgrp: int
    state: str = ""
    """The process state letter (``Z``: a zombie, dead and not reaped yet)."""


@functools.cache
def boot_id() -> str:
    """This boot's id (changes with every boot); empty where the kernel has none."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def process_identity(pid: int) -> Identity | None:
    """Who process ``pid`` is now (zombies included); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp ...": comm may hold spaces or ")", so split after the last ")".
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) <= _STARTTIME:
        return None
    return Identity(int(fields[_STARTTIME]), boot_id(), int(fields[2]), fields[0].decode())


def command_started(pgid: int) -> CommandStarted:
    """The record of a command that just started as group ``pgid``."""
    identity = process_identity(pgid)
    if identity is None or not identity.boot_id:
        return CommandStarted(pgid=pgid)
    return CommandStarted(pgid=pgid, started=identity.started, boot_id=identity.boot_id)


def provably_ours(command: CommandStarted) -> bool:
    """The recorded group's leader is still there, leads its group, and is the very
    process that was recorded (same boot, same start time); a leader that is a zombie
    (killed with the crash, not reaped yet) counts only while a member of its group
    still lives (there is then something to kill)."""
    if not command.started or not command.boot_id or command.pgid <= 1:
        return False
    now = process_identity(command.pgid)
    return (
        now is not None
        and now.pgrp == command.pgid
        and (now.started, now.boot_id) == (command.started, command.boot_id)
        and command.pgid != os.getpgrp()
        and (now.state != "Z" or _group_has_a_live_member(command.pgid))
    )


def _group_has_a_live_member(pgid: int) -> bool:
    """Some process other than a zombie is in group ``pgid`` (a scan of ``/proc``)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pgid:
            member = process_identity(int(entry))
            if member is not None and member.pgrp == pgid and member.state != "Z":
                return True
    return False


async def kill_orphans(commands: Iterable[CommandStarted], grace: float) -> list[int]:
    """Kill every recorded group still alive and provably ours; the pgids it killed."""
    ours = sorted({c.pgid for c in commands if provably_ours(c)})
    skipped = sorted({c.pgid for c in commands} - set(ours))
    if skipped:
        log.info("orphan_groups_not_ours", pgids=skipped)
    if ours:
        async with trio.open_nursery() as nursery:
            for pgid in ours:
                nursery.start_soon(kill_process_group, pgid, grace)
    return ours
