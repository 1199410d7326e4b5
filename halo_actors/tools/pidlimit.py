"""A ``pids`` cgroup per sandboxed command: the process limit for a server running as root.

Root is exempt from ``RLIMIT_NPROC`` (the kernel lets uid 0 fork past it even inside a
user namespace), so a root server bounds a sandboxed command's processes with a cgroup
of its own, ``pids.max`` set, which the command's launcher joins before it becomes
bubblewrap (``sandbox.py``). Blocking code, run in a worker thread, except
:meth:`PidsCgroup.remove`.

Found from ``/proc/self/mountinfo`` and ``/proc/self/cgroup``: a cgroup v1 hierarchy
with the ``pids`` controller, else cgroup v2 where ``pids`` can be enabled below the
server's own cgroup. None when neither is writable (the sandbox then refuses to run).

Invariants: a command's cgroup is created empty with its limit set before anything
joins it, and removed once empty (retried while its last members finish exiting,
bounded by the caller).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import trio

from ..core.logger import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class PidsCgroup:
    """A directory of the pids hierarchy under which per-command cgroups are made."""

    base: str

    def create(self, name: str, max_processes: int) -> str:
        """Make ``base/name`` with ``pids.max``; return its ``cgroup.procs`` path."""
        path = os.path.join(self.base, name)
        os.mkdir(path, 0o755)
        try:
            with open(os.path.join(path, "pids.max"), "w") as f:
                f.write(str(max_processes))
        except OSError:
            os.rmdir(path)
            raise
        return os.path.join(path, "cgroup.procs")

    async def remove(self, name: str) -> None:
        """Remove ``base/name`` once its last process is gone (the caller bounds the wait)."""
        path = os.path.join(self.base, name)
        delay = 0.001
        while True:
            try:
                os.rmdir(path)
                return
            except FileNotFoundError:
                return
            except OSError as exc:  # EBUSY while members finish exiting
                if trio.current_time() + delay > trio.current_effective_deadline():
                    log.warning("sandbox_cgroup_left", path=path, error=str(exc))
                    return
            await trio.sleep(delay)
            delay = min(delay * 2, 0.05)


def find_pids_cgroup() -> PidsCgroup | None:
    """The writable pids cgroup directory of this process, or None."""
    mounts = _cgroup_mounts()
    groups = _own_cgroups()
    for root, mountpoint, version, options in mounts:
        if version == 1 and "pids" in options:
            own = next((p for ctrls, p in groups if "pids" in ctrls.split(",")), None)
            found = _usable(mountpoint, root, own, v2=False)
            if found is not None:
                return found
    for root, mountpoint, version, _ in mounts:
        if version == 2:
            own = next((p for ctrls, p in groups if ctrls == ""), None)
            found = _usable(mountpoint, root, own, v2=True)
            if found is not None:
                return found
    return None


def _usable(mountpoint: str, root: str, own: str | None, *, v2: bool) -> PidsCgroup | None:
    if own is None:
        return None
    rel = os.path.relpath(own, root) if own.startswith(root) else own.lstrip("/")
    base = os.path.normpath(os.path.join(mountpoint, rel))
    if not os.access(base, os.W_OK):
        return None
    if v2 and not _enable_pids_v2(base):
        return None
    probe = f"halo_actors-probe-{os.getpid()}"
    try:
        PidsCgroup(base).create(probe, 1)
        os.rmdir(os.path.join(base, probe))
    except OSError:
        return None
    return PidsCgroup(base)


def _enable_pids_v2(base: str) -> bool:
    try:
        with open(os.path.join(base, "cgroup.controllers")) as f:
            if "pids" not in f.read().split():
                return False
        with open(os.path.join(base, "cgroup.subtree_control")) as f:
            if "pids" in f.read().split():
                return True
        with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
            f.write("+pids")  # refused for a non-root cgroup that holds processes
        return True
    except OSError:
        return False


def _cgroup_mounts() -> list[tuple[str, str, int, set[str]]]:
    """(root inside the hierarchy, mount point, version, super options) of cgroup mounts."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        version = 2 if rest[0] == "cgroup2" else 1
        out.append((fields[3], fields[4], version, set(rest[2].split(","))))
    return out


def _own_cgroups() -> list[tuple[str, str]]:
    """(controllers, path) for each line of ``/proc/self/cgroup``."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return [(ctrls, path) for _, ctrls, path in (line.split(":", 2) for line in lines)]
