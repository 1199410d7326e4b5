"""Workspace-confined file operations for the agent's file tools and ``GET /api/web/file``.

Every path comes from an untrusted caller (the model, or an HTTP query string) as a
workspace-relative string and passes one gate before anything touches the disk:

1. **Lexical check first.** The path must be non-empty, relative and free of NUL bytes,
   and ``os.path.normpath(root/path)`` must stay inside the root.
2. **Realpath re-check.** Symlinks are resolved; the result must still be inside the
   root. A symlink (file or directory, anywhere in the path) leading outside is refused,
   even when it dangles.
3. **Runtime state hidden.** Nothing under a ``.halo`` directory at any depth (the
   workspace's own, or a nested workspace's: the event-log database and its
   ``-wal``/``-shm`` files live there), no event-log file by name (``events.db*``)
   wherever it is, and nothing under the ``hidden`` directories the owner names (the
   HTTP front's token state directory) is reachable, judged on the lexical path and on
   the realpath, so a symlink into any of them is refused too. Listings, glob and grep
   only show what the gate would let through, so they never show ``.halo``.

The operation then works on the checked realpath, never on the caller's string
(``link/../x`` means ``x``), and nothing blocks on a FIFO (only regular files are read or
written). Every open pins the file's directory and checks where it really is before
opening the file with ``O_NOFOLLOW`` (``beneath.py``), so another process swapping a
directory for a symlink between the check and the use (a sandboxed command racing the
server) gets ``PathNotAccessible``, never a file outside. (``write_text`` may still
create empty parent directories through such a swap before its open is refused.)

Errors: ``PathNotAccessible`` for anything outside the rules (HTTP 403),
``InvalidInput`` for bad arguments, and these ``FileProblem`` subclasses::

    FileProblem
    ├── FileNotFound        missing, or a dangling symlink inside the workspace (404)
    ├── BinaryFile          NUL byte in the first 8 KiB, or not UTF-8
    ├── FileTooLarge        over ``max_read_bytes``
    ├── PathIsDirectory     a file operation aimed at a directory
    ├── PathNotDirectory    a listing aimed at a file
    ├── EditTargetMissing   ``edit``'s old text does not occur
    └── EditNotUnique       ``edit``'s old text occurs more than once

Messages name workspace-relative paths only, never the absolute root. The functions are
plain blocking code; async callers run them through ``trio.to_thread.run_sync``. Glob
patterns are parsed and matched in ``globbing.py``; files are opened, sniffed and
grepped as text in ``textfiles.py``.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from halo_actors.core.errors import FileProblem, InvalidInput, PathNotAccessible

from .beneath import open_beneath
from .globbing import OUTSIDE, GlobParts, glob_matches, parse_glob
from .textfiles import SNIFF_BYTES, grep_file, looks_binary, open_regular, skip_line

__all__ = [
    "HALO_DIR",
    "BinaryFile",
    "EditNotUnique",
    "EditTargetMissing",
    "FileLimits",
    "FileNotFound",
    "FileTooLarge",
    "PathIsDirectory",
    "PathNotDirectory",
    "Workspace",
]

HALO_DIR = ".halo"  # runtime state under a workspace root; never reachable, at any depth
EVENT_LOG_NAMES = re.compile(r"events\.db(?:-wal|-shm|-journal|-halo-journal)?")
"""Event-log database files (SQLite, its side files and the log's own journal): hidden
wherever they lie."""

_HIDDEN = "path is not accessible"


class FileNotFound(FileProblem):
    """No such file, or a symlink inside the workspace that dangles."""


class BinaryFile(FileProblem):
    """The file has a NUL byte in its first 8 KiB or is not valid UTF-8."""


class FileTooLarge(FileProblem):
    """The file, or the requested window of it, is over ``max_read_bytes``."""


class PathIsDirectory(FileProblem):
    """A file operation was aimed at a directory."""


class PathNotDirectory(FileProblem):
    """A directory listing was aimed at something that is not a directory."""


class EditTargetMissing(FileProblem):
    """``edit``'s ``old`` text does not occur in the file."""


class EditNotUnique(FileProblem):
    """``edit``'s ``old`` text occurs more than once and ``replace_all`` was not set."""


@dataclass(frozen=True)
class FileLimits:
    """Caps on what one file operation may read, write or return."""

    max_read_bytes: int = 256_000  # read_text/edit refuse bigger files or windows
    max_write_bytes: int = 1_000_000  # write_text/edit refuse bigger content
    max_list_entries: int = 1_000  # list_dir/glob return this many, then a note line
    max_grep_matches: int = 200  # grep stops here and adds a note line


@dataclass(frozen=True)
class _Target:
    """A path that passed the gate."""

    lexical: str  # normalised absolute path, inside the root, outside .halo
    real: str  # its realpath, inside the root, outside .halo
    shown: str  # workspace-relative form of ``lexical``; the only form messages use


class Workspace:
    """One workspace directory and the rules for touching files under it."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        limits: FileLimits | None = None,
        *,
        hidden: tuple[str | os.PathLike[str], ...] = (),
    ) -> None:
        real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(real):
            raise InvalidInput("workspace root is not a directory")
        self.root = Path(real)  # realpath'd once; every check compares against it
        self.limits = limits if limits is not None else FileLimits()
        self._root = real
        below = (os.path.realpath(os.fspath(h)) for h in hidden)
        self._hidden = tuple(h for h in below if h != real and _within(h, real))
        """Files and directories never reachable (realpaths strictly inside the root; the
        others are out of reach anyway), e.g. the token state directory and token file."""

    def resolve(self, rel: str, *, must_exist: bool = True) -> Path:
        """Return the realpath of ``rel`` after the lexical and realpath checks."""
        target = self._check(rel)
        if must_exist:
            self._require_exists(target)
        return Path(target.real)

    def resolve_for_serving(self, rel: str) -> Path:
        """The ``/api/web/file`` rules: an existing regular file that passes the gate.

        ``PathNotAccessible`` → 403, ``FileNotFound`` (also a dangling symlink) → 404,
        any other ``FileProblem`` (a directory, a FIFO, …) is the front's to map.
        """
        return Path(self._existing_file(rel).real)

    def open_for_serving(self, rel: str) -> tuple[int, str]:
        """``resolve_for_serving``'s file, opened without a race (``beneath.py``): its
        descriptor (the caller closes it) and its name."""
        target = self._existing_file(rel)
        with _os_errors(target.shown):
            fd = self._open(target.real, os.O_RDONLY | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise FileProblem(f"{target.shown}: not a regular file")
        return fd, os.path.basename(target.real)

    def _open(self, real: str, flags: int) -> int:
        """Open a checked realpath, its directory pinned and re-checked (``beneath.py``)."""
        return open_beneath(real, flags, self._allowed)

    def _allowed(self, real: str) -> bool:
        return _within(real, self._root) and not self._is_runtime_state(real)

    def _check(self, rel: str) -> _Target:
        if not rel:
            raise PathNotAccessible("path is empty")
        if "\x00" in rel:
            raise PathNotAccessible("path contains a NUL byte")
        if os.path.isabs(rel):
            raise PathNotAccessible(OUTSIDE)
        lexical = os.path.normpath(os.path.join(self._root, rel))
        if not _within(lexical, self._root):
            raise PathNotAccessible(OUTSIDE)
        if self._is_runtime_state(lexical):
            raise PathNotAccessible(_HIDDEN)
        real = _realpath(lexical)
        if real is None:
            shown = os.path.relpath(lexical, self._root)
            raise FileProblem(f"{shown}: changed while it was being checked; try again")
        if not _within(real, self._root):
            raise PathNotAccessible(OUTSIDE)
        if self._is_runtime_state(real):
            raise PathNotAccessible(_HIDDEN)
        return _Target(lexical, real, os.path.relpath(lexical, self._root))

    def _is_runtime_state(self, path: str) -> bool:
        """``path`` (inside the root) is, or is under, state no caller may touch."""
        parts = os.path.relpath(path, self._root).split(os.sep)
        if HALO_DIR in parts or EVENT_LOG_NAMES.fullmatch(parts[-1]):
            return True
        if any(_within(path, hidden) for hidden in self._hidden):
            return True
        halo = os.path.join(self._root, HALO_DIR)
        halo_real = os.path.realpath(halo)  # .halo may itself be a symlink within the root
        return halo_real != halo and _within(halo_real, self._root) and _within(path, halo_real)

    def _require_exists(self, target: _Target) -> None:
        if os.path.exists(target.real):
            return
        if os.path.lexists(target.lexical):
            raise FileNotFound(f"{target.shown}: not found (dangling symlink)")
        raise FileNotFound(f"{target.shown}: not found")

    def _existing_file(self, rel: str) -> _Target:
        return self._require_file(self._check(rel))

    def _require_file(self, target: _Target) -> _Target:
        self._require_exists(target)
        if os.path.isdir(target.real):
            raise PathIsDirectory(f"{target.shown}: is a directory")
        if not os.path.isfile(target.real):
            raise FileProblem(f"{target.shown}: not a regular file")
        return target

    def read_text(self, rel: str, *, offset_line: int = 0, max_lines: int | None = None) -> str:
        """Return the file's text: whole, or the window of lines asked for.

        Lines keep their endings; ``offset_line`` counts from 0. A whole-file read over
        ``max_read_bytes`` is refused (``FileTooLarge``) with a message suggesting
        ``offset_line``/``max_lines``; a window is read line by line, so it works on a
        file of any size, and is refused the same way if the window itself is too big.
        """
        if offset_line < 0 or (max_lines is not None and max_lines < 0):
            raise InvalidInput("offset_line and max_lines must not be negative")
        return self._read(self._existing_file(rel), offset_line, max_lines)

    def write_text(self, rel: str, content: str) -> int:
        """Write ``content`` as UTF-8, creating parent directories; return bytes written.

        The target's realpath must pass the gate, so writing through a symlink leading
        out (final component or any directory on the way) is refused; the file is
        opened with ``O_NOFOLLOW``.
        """
        return self._write(self._check(rel), content)

    def edit(self, rel: str, old: str, new: str, *, replace_all: bool = False) -> int:
        """Replace the exact string ``old`` by ``new``; return how many were replaced.

        ``old`` must occur exactly once unless ``replace_all``. Line endings and every
        other byte outside the replaced text are kept as they were.
        """
        if not old:
            raise InvalidInput("old text is empty")
        if old == new:
            raise InvalidInput("old and new text are the same")
        target = self._existing_file(rel)
        text = self._read(target, 0, None)
        count = text.count(old)
        if count == 0:
            raise EditTargetMissing(f"{target.shown}: old text not found")
        if count > 1 and not replace_all:
            raise EditNotUnique(
                f"{target.shown}: old text occurs {count} times; "
                "add surrounding context to make it unique, or set replace_all"
            )
        self._write(target, text.replace(old, new, -1 if replace_all else 1))
        return count if replace_all else 1

    def _read(self, target: _Target, offset_line: int, max_lines: int | None) -> str:
        windowed = offset_line > 0 or max_lines is not None
        with _os_errors(target.shown):
            f = open_regular(target.real, self._open)
        if f is None:
            raise FileProblem(f"{target.shown}: not a regular file")
        with _os_errors(target.shown), f:
            if looks_binary(f.read(SNIFF_BYTES)):
                raise BinaryFile(f"{target.shown}: binary file, not shown")
            f.seek(0)
            if windowed:
                data = self._read_window(f, target.shown, offset_line, max_lines)
            else:
                data = self._read_whole(f, target.shown)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise BinaryFile(f"{target.shown}: binary file, not shown") from None

    def _read_whole(self, f: BinaryIO, shown: str) -> bytes:
        cap = self.limits.max_read_bytes
        data = f.read(cap + 1)
        if len(data) > cap:
            size = os.fstat(f.fileno()).st_size
            raise FileTooLarge(
                f"{shown}: {size} bytes is over the {cap}-byte read limit; "
                "read part of it with offset_line and max_lines"
            )
        return data

    def _read_window(self, f: BinaryIO, shown: str, offset: int, max_lines: int | None) -> bytes:
        cap = self.limits.max_read_bytes
        for _ in range(offset):
            if not skip_line(f):
                return b""
        out = bytearray()
        taken = 0
        while max_lines is None or taken < max_lines:
            line = f.readline(cap + 1 - len(out))
            if not line:
                break
            out += line
            taken += 1
            if len(out) > cap:
                raise FileTooLarge(
                    f"{shown}: the requested lines are over the {cap}-byte read limit; "
                    "ask for fewer with max_lines"
                )
        return bytes(out)

    def _write(self, target: _Target, content: str) -> int:
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput("content is not valid Unicode text") from None
        cap = self.limits.max_write_bytes
        if len(data) > cap:
            raise InvalidInput(f"content is {len(data)} bytes, over the {cap}-byte write limit")
        if os.path.isdir(target.real):
            raise PathIsDirectory(f"{target.shown}: is a directory")
        if os.path.lexists(target.real) and not os.path.isfile(target.real):
            raise FileProblem(f"{target.shown}: not a regular file")
        # O_NONBLOCK: a FIFO swapped in after the check fails (ENXIO) instead of hanging
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with _os_errors(target.shown):
            os.makedirs(os.path.dirname(target.real), exist_ok=True)
            with os.fdopen(self._open(target.real, flags), "wb") as f:
                f.write(data)
        return len(data)

    def list_dir(self, rel: str = ".") -> list[str]:
        """Names in the directory, sorted, directories with a trailing ``/``.

        Entries the gate would refuse (``.halo``, symlinks leading out or into
        ``.halo``) are left out. Past ``max_list_entries`` a last line says how many more.
        """
        target = self._check(rel)
        self._require_exists(target)
        if not os.path.isdir(target.real):
            raise PathNotDirectory(f"{target.shown}: not a directory")
        with _os_errors(target.shown):
            names = sorted(e.name + ("/" if e.is_dir() else "") for e in self._entries(target.real))
        cap = self.limits.max_list_entries
        if len(names) > cap:
            return [*names[:cap], f"… {len(names) - cap} more entries not shown"]
        return names

    def glob(self, pattern: str) -> list[str]:
        """Workspace-relative paths matching ``pattern``, sorted, directories with ``/``.

        ``*``, ``?`` and ``[...]`` match within one segment, ``**`` any number of
        directories. As in the shell, wildcards do not match a leading ``.``. Symlinked
        directories are listed but not descended into. ``..`` and absolute patterns are
        refused. Past ``max_list_entries`` a last line says the list was cut.
        """
        segs = parse_glob(pattern)
        cap = self.limits.max_list_entries
        found: list[str] = []
        for parts, entry in self._walk(self._root, lambda p: glob_matches(p, segs, prefix=True)):
            if glob_matches(parts, segs, prefix=False):
                found.append("/".join(parts) + ("/" if entry.is_dir() else ""))
                if len(found) > cap:
                    return [*sorted(found[:cap]), "… more matches not shown; narrow the pattern"]
        return sorted(found)

    def grep(self, pattern: str, rel: str = ".", *, glob: str | None = None) -> list[str]:
        """Lines matching the regex ``pattern``, as ``path:line: text``.

        ``rel`` is a file or a directory searched recursively; hidden entries (names
        starting with ``.``) inside it, binary files and unreadable files are skipped.
        ``glob`` filters files: without ``/`` it matches the file name, with ``/`` the
        workspace-relative path. Past ``max_grep_matches`` a last line says it stopped.
        """
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise InvalidInput(f"bad regular expression: {exc}") from None
        segs = parse_glob(glob) if glob is not None else None
        target = self._check(rel)
        self._require_exists(target)
        cap = self.limits.max_grep_matches
        hits: list[str] = []
        for shown, real in self._grep_files(target, segs):
            hits.extend(grep_file(real, shown, regex, cap + 1 - len(hits), self._open))
            if len(hits) > cap:
                return [*hits[:cap], f"… stopped after {cap} matches; narrow the search"]
        return hits

    def _grep_files(self, target: _Target, segs: GlobParts | None) -> Iterator[tuple[str, str]]:
        if not os.path.isdir(target.real):
            yield self._require_file(target).shown, target.real
            return

        def wanted(parts: GlobParts, *, prefix: bool) -> bool:
            if parts[-1].startswith("."):
                return False
            if segs is None or (prefix and len(segs) == 1):
                return True
            return glob_matches(parts[-1:] if len(segs) == 1 else parts, segs, prefix=prefix)

        for parts, entry in self._walk(target.real, lambda p: wanted(p, prefix=True)):
            if entry.is_file() and wanted(parts, prefix=False):
                yield "/".join(parts), entry.path

    def _entries(self, dir_real: str) -> list[os.DirEntry[str]]:
        """The entries of a real directory that the gate would let through, by name."""
        with os.scandir(dir_real) as it:
            return sorted((e for e in it if self._visible(e)), key=lambda e: e.name)

    def _visible(self, entry: os.DirEntry[str]) -> bool:
        real = _realpath(entry.path) if entry.is_symlink() else entry.path
        if real is None:  # swapped while we looked: leave it out
            return False
        return (
            _within(real, self._root)
            and not self._is_runtime_state(entry.path)
            and not self._is_runtime_state(real)
        )

    def _walk(
        self, dir_real: str, descend: Callable[[GlobParts], bool]
    ) -> Iterator[tuple[GlobParts, os.DirEntry[str]]]:
        """Visible entries under a real directory, depth first in name order.

        Yields workspace-relative parts. Descends only into real (non-symlink)
        directories that ``descend`` accepts; unreadable directories are skipped.
        """
        stack = [iter(self._readable_entries(dir_real))]
        while stack:
            entry = next(stack[-1], None)
            if entry is None:
                stack.pop()
                continue
            parts = tuple(os.path.relpath(entry.path, self._root).split(os.sep))
            yield parts, entry
            if entry.is_dir(follow_symlinks=False) and descend(parts):
                stack.append(iter(self._readable_entries(entry.path)))

    def _readable_entries(self, dir_real: str) -> list[os.DirEntry[str]]:
        try:
            return self._entries(dir_real)
        except OSError:
            return []


def _realpath(path: str) -> str | None:
    """``os.path.realpath``, or None when the path changed under it (a symlink replaced
    by a directory between its ``lstat`` and its ``readlink`` raises ``EINVAL``)."""
    try:
        return os.path.realpath(path)
    except OSError:
        return None


def _within(path: str, base: str) -> bool:
    """Whether the normalised absolute ``path`` is ``base`` or below it."""
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


@contextmanager
def _os_errors(shown: str) -> Iterator[None]:
    """Turn an ``OSError`` into a workspace error whose message names only ``shown``."""
    try:
        yield
    except FileNotFoundError:
        raise FileNotFound(f"{shown}: not found") from None
    except IsADirectoryError:
        raise PathIsDirectory(f"{shown}: is a directory") from None
    except (FileExistsError, NotADirectoryError):
        raise FileProblem(f"{shown}: a parent on the path is not a directory") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink swapped in after the check
            raise PathNotAccessible(_HIDDEN) from None
        raise FileProblem(f"{shown}: {exc.strerror or 'cannot be accessed'}") from None
