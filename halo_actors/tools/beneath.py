"""Open a checked path without a race: pin its directory, verify where it really is.

``files.Workspace`` checks a path (lexically and by realpath) and then opens it. A
process writing in the workspace at the same time (a sandboxed command running a loop)
could swap a directory on that path for a symlink to the outside between the check and
the open, and make the server read, truncate or serve a file it never checked (the
token file, another workspace's log). :func:`open_beneath` closes that window:

1. the parent directory is opened first (``O_DIRECTORY``), and its true path is read
   back from ``/proc/self/fd``: whatever symlinks were swapped in, that is where the
   descriptor points now, and for good;
2. ``allowed(true path of the file)`` must hold (the caller's gate: inside the
   workspace, not runtime state), else ``PathNotAccessible``; nothing outside was
   opened but a directory;
3. only then is the last component opened relative to that descriptor, with
   ``O_NOFOLLOW`` (a symlink swapped in there fails with ``ELOOP``).

Linux only (``/proc/self/fd``). Plain blocking code.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from halo_actors.core.errors import PathNotAccessible

__all__ = ["open_beneath"]

_HIDDEN = "path is not accessible"


def open_beneath(real: str, flags: int, allowed: Callable[[str], bool], mode: int = 0o666) -> int:
    """A descriptor for ``real`` (an absolute, checked path) opened with ``flags``.

    Raises ``PathNotAccessible`` when the directory holding it is no longer where the
    check saw it; ``OSError`` as ``os.open`` would (``ELOOP`` for a swapped-in symlink).
    """
    parent, name = os.path.split(real)
    if not name:
        raise PathNotAccessible(_HIDDEN)
    dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        actual = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
        if not allowed(actual):
            raise PathNotAccessible(_HIDDEN)
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
