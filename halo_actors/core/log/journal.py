"""The SQLite log's journal: an append-only file that makes a commit one ``write()``.

The SQLite log (``sqlite.py``) makes a group of appends durable by writing it here as
one *frame*, and indexes it into SQLite behind, a batch of frames at a time. This
module only frames, writes, reads and cuts the file; the log decides when.

A frame is a header (``<IIQQ``: payload length, CRC-32 of the payload, first and last
seq) and a payload: the group's stored rows, each the JSON array of its records (a row
of ``batches``, exactly as SQLite will hold it), joined by newlines (JSON as the log
encodes it has no raw newline).

Invariants:
- the file is opened ``O_APPEND`` (never through a symlink) and created ``0600``; one
  ``write()`` a frame, and a short write is a failed write (the caller fails its log:
  nothing after it is written);
- **a valid prefix**: :func:`read_rows` accepts frames while each is whole, its CRC
  matches, and its seqs follow the previous frame's without a gap, and stops at the
  first that is not (a write cut by a crash, or whatever an OS crash left of the
  tail); nothing past that point is ever read;
- the file is cut (truncated to nothing) only when every frame in it is in SQLite and
  SQLite's WAL has been synced to disk (``sync_file``), so no record is ever only in
  a file that is gone; a reader that reads the file while it is cut sees a valid
  prefix of either version, never a mix accepted as valid (CRC and seq contiguity).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from ..events import Record, decode_records

HEADER = struct.Struct("<IIQQ")
ROW_SEPARATOR = b"\n"


def journal_path(db: Path) -> Path:
    """Where the journal of the database file ``db`` lives (beside it)."""
    return db.with_name(db.name + "-halo-journal")


class Journal:
    """The writing side: the file open for appending, and how many bytes it holds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        self._fd = os.open(path, flags, 0o600)  # never through a symlink planted there
        os.fchmod(self._fd, 0o600)
        self.size = os.fstat(self._fd).st_size
        self.writes = 0

    def write(self, first_seq: int, last_seq: int, rows: list[bytes]) -> None:
        """Append one frame of ``rows`` (the seqs ``first_seq..last_seq``, every one of
        them); raises ``OSError`` if it is not wholly written."""
        payload = ROW_SEPARATOR.join(rows)
        frame = HEADER.pack(len(payload), zlib.crc32(payload), first_seq, last_seq) + payload
        written = os.write(self._fd, frame)
        if written != len(frame):  # a full disk, mostly: the frame's tail is missing
            self.size += written
            raise OSError(f"journal write cut short: {written} of {len(frame)} bytes")
        self.size += written
        self.writes += 1

    def cut(self) -> None:
        """Empty the file (every frame in it is in SQLite, and synced: see the module doc)."""
        os.ftruncate(self._fd, 0)
        self.size = 0

    def close(self) -> None:
        os.close(self._fd)


def read_rows(path: Path, after_seq: int = 0) -> Iterator[tuple[list[Record], bytes]]:
    """The rows of the file's valid prefix whose records come after ``after_seq``, in seq
    order, each its records and its stored body (see the module doc); none if there is
    no file. A row is whole or absent: a frame's rows are all past ``after_seq`` or all
    at or before it, as SQLite indexes whole frames."""
    return rows_in(read_journal(path), after_seq)


def read_journal(path: Path) -> bytes:
    """The file's bytes as they are now (none if there is no file), for :func:`rows_in`."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def rows_in(data: bytes, after_seq: int) -> Iterator[tuple[list[Record], bytes]]:
    """:func:`read_rows` of bytes read earlier: only frames past ``after_seq`` are decoded."""
    for _, last, payload in _frames(data):
        if last <= after_seq:
            continue
        for row in payload.split(ROW_SEPARATOR):
            records = decode_records(row)
            if records[-1].seq > after_seq:
                yield records, row


def _frames(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """``(first_seq, last_seq, payload)`` of each frame of the valid prefix of ``data``."""
    offset, expected = 0, None
    while offset + HEADER.size <= len(data):
        length, crc, first, last = HEADER.unpack_from(data, offset)
        payload = data[offset + HEADER.size : offset + HEADER.size + length]
        if len(payload) < length or zlib.crc32(payload) != crc or last < first:
            return
        if expected is not None and first != expected:
            return
        yield first, last, payload
        expected = last + 1
        offset += HEADER.size + length


def sync_file(path: Path) -> None:
    """``fsync`` the file at ``path`` if it exists (SQLite's WAL, before a cut)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
