"""Reading untrusted files as text, safely: regular files only, binary sniffing, grep.

Nothing here blocks on a FIFO or a device (files open non-blocking and must be
regular), a line of any length is skipped without being held in memory, and a
file whose head has a NUL byte or is not UTF-8 counts as binary. Plain blocking
code, run by ``files.Workspace`` in a worker thread.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
from collections.abc import Callable
from typing import BinaryIO

SNIFF_BYTES = 8192
"""Binary detection looks at this much of a file's head."""
GREP_LINE_CHARS = 500
"""A grep hit shows at most this much of its line."""


Opener = Callable[[str, int], int]
"""``os.open``-like: (path, flags) → descriptor; ``files.Workspace`` pins the directory."""


def open_regular(real: str, opener: Opener = os.open) -> BinaryIO | None:
    """Open a regular file for reading, or None; never blocks on a FIFO or device."""
    fd = opener(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def looks_binary(head: bytes) -> bool:
    """A NUL byte, or bytes that cannot start valid UTF-8 text."""
    if b"\x00" in head:
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return True
    return False


def skip_line(f: BinaryIO) -> bool:
    """Consume one line of any length without holding it; False at end of file."""
    chunk = f.readline(SNIFF_BYTES)
    if not chunk:
        return False
    while chunk and not chunk.endswith(b"\n"):
        chunk = f.readline(SNIFF_BYTES)
    return True


def grep_file(
    real: str, shown: str, regex: re.Pattern[str], budget: int, opener: Opener = os.open
) -> list[str]:
    """Up to ``budget`` hits in one file; binary or unreadable files give none."""
    hits: list[str] = []
    try:
        opened = open_regular(real, opener)
        if opened is None:
            return hits
        with opened as f:
            if looks_binary(f.read(SNIFF_BYTES)):
                return hits
            f.seek(0)
            for number, raw in enumerate(f, start=1):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if regex.search(line):
                    hits.append(f"{shown}:{number}: {line[:GREP_LINE_CHARS]}")
                    if len(hits) >= budget:
                        break
    except OSError:
        return []
    return hits
