"""The workspace sandbox: run one shell command under bubblewrap, confined to its workspace.

A ``workspace``-level session's ``shell_exec`` runs through here (``docs/design/sandbox.md``
has the choice of bubblewrap and the threat model; ``docs/security.md`` the levels).

What the command sees (mount namespace: what is not bound does not exist):

- the workspace, read-write, at its real path; inside it every ``hidden`` path (its own
  ``.halo/``, the token state directory, other workspaces' runtime state) is an empty
  read-only directory (or ``/dev/null`` for a file);
- ``/usr``, ``/etc`` and the other system directories read-only (the secrets of
  ``/etc`` masked); a fresh ``/tmp``, ``/dev`` and ``/proc``;
- nothing else: no home directory, no token file, no state directory, no other workspace.

And: a new PID namespace (it sees and signals only its own processes), a new user,
IPC, UTS and (unless ``network``) network namespace, every capability dropped,
``no_new_privs`` (bubblewrap sets it), no nested user namespaces where bubblewrap
supports ``--disable-userns``, an empty environment but for ``PATH``, ``HOME``,
``LANG`` and ``TMPDIR``, and a bound on its processes (``max_processes``):
``RLIMIT_NPROC`` set inside the user namespace (counted per namespace since Linux
5.14), or, when the server runs as root (exempt from that limit), a ``pids`` cgroup
per command.

Invariants:
- fail closed: :meth:`Sandbox.confine` raises :class:`SandboxUnavailable` (naming the
  cause and the fix) when the sandbox cannot start; a command never runs unconfined;
- the wrapped command keeps the caller's process group: bubblewrap runs without
  ``--new-session`` and with ``--die-with-parent``, so signalling the group (the
  runner's hard kill) ends the whole confined tree, and the PID namespace dies with
  its init even for a process that left the group;
- a command's cgroup (root only) is removed after the command, bounded in time.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from ..core.errors import HaloError
from ..core.logger import get_logger
from .files import HALO_DIR
from .pidlimit import PidsCgroup, find_pids_cgroup

log = get_logger(__name__)

__all__ = [
    "DEFAULT_MAX_PROCESSES",
    "Sandbox",
    "SandboxPolicy",
    "SandboxUnavailable",
    "ShellConfinement",
    "bwrap_argv",
]

DEFAULT_MAX_PROCESSES = 256
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt")
"""Top-level directories bound read-only (a symlink, as on merged-/usr systems, is
recreated as the same symlink)."""
ETC_SECRETS = ("shadow", "shadow-", "gshadow", "gshadow-", "ssh", "ssl/private", "sudoers.d")
"""Under ``/etc``: masked, for a server running as root (who owns them all)."""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LAUNCHER = 'trap "" TERM; exec "$@"'
"""Runs bubblewrap with SIGTERM ignored, so the group's SIGTERM reaches the command but
not bubblewrap, whose death would SIGKILL the sandbox at once (``--die-with-parent``):
the command keeps its grace period before the group's SIGKILL, as unconfined."""
LAUNCHER_CGROUP = 'trap "" TERM; echo 0 > "$0" && exec "$@"'
"""The same, first joining the pids cgroup whose ``cgroup.procs`` is ``$0``."""
INSTALL_FIX = "install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap)"


class SandboxUnavailable(HaloError):
    """The sandbox cannot start here; the command was not run. The message names why and the fix."""


@dataclass(frozen=True)
class SandboxPolicy:
    """What one confined command may see and do."""

    workspace: str
    """The workspace's realpath, bound read-write."""
    hidden: tuple[str, ...] = ()
    """Paths masked inside the workspace (realpaths; those outside it are unbound anyway)."""
    network: bool = False
    """Share the host's network; off, the command has only its own loopback."""
    max_processes: int = DEFAULT_MAX_PROCESSES
    """Processes (threads count) the command may have at once."""


def bwrap_argv(
    bwrap: str,
    policy: SandboxPolicy,
    command: list[str],
    *,
    disable_userns: bool = True,
    nproc_limit: bool = True,
) -> list[str]:
    """The bubblewrap command line that runs ``command`` under ``policy`` (pure, no I/O
    but ``lstat``/``readlink`` of the system directories and masked paths)."""
    argv = [bwrap, "--die-with-parent", "--unshare-all", "--unshare-user", "--cap-drop", "ALL"]
    if disable_userns:
        argv.append("--disable-userns")
    if policy.network:
        argv.append("--share-net")
    argv += ["--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", policy.workspace]
    argv += ["--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/tmp"]
    argv += _system_binds(policy.network)
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    argv += ["--bind", policy.workspace, policy.workspace]
    for path in _inside(policy.hidden, policy.workspace):
        argv += _mask(path)
    argv += ["--chdir", policy.workspace, "--"]
    # The launcher made bubblewrap ignore SIGTERM (see LAUNCHER): the command gets the
    # default action back, so it still dies on (or handles) the group's SIGTERM.
    argv += ["env", "--default-signal=TERM"]
    if nproc_limit:
        n = str(policy.max_processes)
        argv += ["prlimit", f"--nproc={n}:{n}", "--"]
    return argv + command


def _system_binds(network: bool) -> list[str]:
    out: list[str] = []
    for name in SYSTEM_DIRS:
        path = "/" + name
        if os.path.islink(path):
            out += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            out += ["--ro-bind", path, path]
    for secret in ETC_SECRETS:
        out += _mask(os.path.join("/etc", secret))
    resolv = os.path.realpath("/etc/resolv.conf")
    if network and not resolv.startswith("/etc/") and os.path.exists(resolv):
        out += ["--ro-bind", resolv, resolv]  # e.g. systemd-resolved's file under /run
    return out


def _inside(paths: Iterable[str], root: str) -> list[str]:
    prefix = root.rstrip("/") + "/"
    return sorted({os.path.realpath(p) for p in paths if os.path.realpath(p).startswith(prefix)})


def _mask(path: str) -> list[str]:
    """Arguments hiding ``path`` (if it exists): an empty read-only directory, or /dev/null."""
    if os.path.isdir(path):
        return ["--tmpfs", path, "--remount-ro", path]
    if os.path.lexists(path):
        return ["--ro-bind", "/dev/null", path]
    return []


@dataclass(frozen=True)
class ShellConfinement:
    """How a ``workspace``-level session's commands are confined (its profile's choices)."""

    sandbox: Sandbox
    network: bool = False
    max_processes: int = DEFAULT_MAX_PROCESSES

    def policy(self, workspace: str) -> SandboxPolicy:
        """The policy for one command now: the workspace's own ``.halo`` and whatever
        the sandbox's ``hidden`` names are masked."""
        own = os.path.join(workspace, HALO_DIR)
        hidden = (own, *self.sandbox.hidden())
        return SandboxPolicy(workspace, tuple(hidden), self.network, self.max_processes)


@dataclass
class Sandbox:
    """Confines commands with bubblewrap; one per runtime, checked once on first use.

    ``hidden`` is asked, per command, for the paths to mask beyond the policy's own
    (the HTTP front passes the state directory and every known workspace's ``.halo``).
    """

    hidden: Callable[[], Iterable[str]] = tuple
    bwrap: str | None = field(default_factory=lambda: shutil.which("bwrap"))
    _ready: bool = False
    _disable_userns: bool = False
    _cgroup: PidsCgroup | None = None
    _lock: trio.Lock = field(default_factory=trio.Lock)

    @asynccontextmanager
    async def confine(
        self, policy: SandboxPolicy
    ) -> AsyncIterator[Callable[[list[str]], list[str]]]:
        """Yield a function wrapping a command line in the sandbox; clean up after it.

        Raises :class:`SandboxUnavailable` before yielding when the sandbox cannot start.
        """
        await self.ensure_ready(policy.workspace)
        assert self.bwrap is not None
        bwrap, disable = self.bwrap, self._disable_userns
        if self._cgroup is None:

            def launch(command: list[str]) -> list[str]:
                inner = bwrap_argv(bwrap, policy, command, disable_userns=disable)
                return ["/bin/sh", "-c", LAUNCHER, "sh", *inner]

            yield launch
            return
        cgroup = self._cgroup
        name = f"halo_actors-{os.getpid()}-{secrets.token_hex(4)}"
        procs = await trio.to_thread.run_sync(cgroup.create, name, policy.max_processes)
        try:

            def wrap(command: list[str]) -> list[str]:
                inner = bwrap_argv(
                    bwrap, policy, command, disable_userns=disable, nproc_limit=False
                )
                # The launcher joins the cgroup, then becomes bubblewrap (same pid and group).
                return ["/bin/sh", "-c", LAUNCHER_CGROUP, procs, *inner]

            yield wrap
        finally:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 2):
                await cgroup.remove(name)

    async def ensure_ready(self, workspace: str) -> None:
        """Check once (a sandbox started in ``workspace``) that commands can be confined;
        :class:`SandboxUnavailable` names the cause and the fix. Only success is kept."""
        if self._ready:
            return
        async with self._lock:
            if not self._ready:
                await self._probe(workspace)
                self._ready = True

    async def _probe(self, workspace: str) -> None:
        """Start one empty sandbox; on failure raise with the cause and the fix."""
        if self.bwrap is None:
            raise SandboxUnavailable(
                f"sandbox unavailable: bubblewrap (bwrap) is not installed; "
                f"{INSTALL_FIX}. The command was not run."
            )
        help_text = await _output([self.bwrap, "--help"])
        self._disable_userns = "--disable-userns" in help_text
        root = os.geteuid() == 0
        if root:
            self._cgroup = await trio.to_thread.run_sync(find_pids_cgroup)
            if self._cgroup is None:
                raise SandboxUnavailable(
                    "sandbox unavailable: the server runs as root, which the process limit "
                    "(RLIMIT_NPROC) does not bind, and no writable pids cgroup was found; "
                    "run the server as an unprivileged user, or give it a writable cgroup "
                    "with the pids controller. The command was not run."
                )
        elif shutil.which("prlimit") is None:
            raise SandboxUnavailable(
                "sandbox unavailable: prlimit (util-linux) is missing, so the process limit "
                "cannot be set; install util-linux. The command was not run."
            )
        policy = SandboxPolicy(workspace)
        argv = bwrap_argv(
            self.bwrap, policy, ["true"], disable_userns=self._disable_userns, nproc_limit=not root
        )
        result = await trio.run_process(
            argv, stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True, check=False
        )
        if result.returncode != 0:
            said = result.stderr.decode("utf-8", "replace").strip() or f"exit {result.returncode}"
            raise SandboxUnavailable(
                f"sandbox unavailable: bubblewrap could not start ({said}); it needs "
                "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "user.max_user_namespaces > 0; in a container, a seccomp/AppArmor profile "
                "that allows them). The command was not run."
            )
        log.info("sandbox_ready", bwrap=self.bwrap, pids="cgroup" if root else "rlimit")


async def _output(argv: list[str]) -> str:
    try:
        result = await trio.run_process(
            argv, stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True, check=False
        )
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EACCES):
            raise SandboxUnavailable(
                f"sandbox unavailable: cannot run {argv[0]} ({exc.strerror}); {INSTALL_FIX}. "
                "The command was not run."
            ) from None
        raise
    return (result.stdout + result.stderr).decode("utf-8", "replace")
