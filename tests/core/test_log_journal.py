"""The journal file on its own (``core/log/journal.py``): frames, the valid prefix, cuts."""

from __future__ import annotations

import stat
from pathlib import Path

from halo_actors.core.events import Record, TextStreamed, encode_record
from halo_actors.core.log.journal import HEADER, Journal, journal_path, read_rows


def row(session_id: str, first: int, last: int) -> tuple[list[Record], bytes]:
    """A stored row: its records and its body (the JSON array SQLite holds)."""
    records = [
        Record(seq=seq, session_id=session_id, ts=1_000 + seq, event=TextStreamed(text=f"t{seq}"))
        for seq in range(first, last + 1)
    ]
    return records, b"[" + b",".join(map(encode_record, records)) + b"]"


def write_frames(path: Path, frames: list[list[tuple[list[Record], bytes]]]) -> Journal:
    journal = Journal(path)
    for rows in frames:
        journal.write(rows[0][0][0].seq, rows[-1][0][-1].seq, [body for _, body in rows])
    return journal


def test_frames_read_back_as_their_rows_past_a_seq(tmp_path: Path) -> None:
    path = journal_path(tmp_path / "events.db")
    assert path.name == "events.db-halo-journal"
    frames = [[row("a", 1, 3), row("a>b", 4, 4)], [row("a", 5, 9)]]
    journal = write_frames(path, frames)
    try:
        assert journal.writes == 2 and journal.size == path.stat().st_size
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert list(read_rows(path)) == [r for rows in frames for r in rows]
        assert list(read_rows(path, 4)) == [row("a", 5, 9)]
        assert list(read_rows(path, 9)) == []
        journal.cut()
        assert path.stat().st_size == journal.size == 0
        assert list(read_rows(path)) == []
    finally:
        journal.close()
    assert list(read_rows(tmp_path / "none")) == []


def test_only_the_valid_prefix_is_read_torn_corrupt_or_gapped_frames_end_it(
    tmp_path: Path,
) -> None:
    """A torn tail (a write cut by a crash or a full disk), a frame whose bytes changed,
    or a frame whose seqs do not follow the previous one's: reading stops there."""
    path = journal_path(tmp_path / "events.db")
    good = [[row("a", 1, 2)], [row("a", 3, 3)]]
    write_frames(path, good).close()
    kept = path.read_bytes()
    prefix = [r for rows in good for r in rows]

    with path.open("ab") as f:  # torn: half a frame
        _, body = row("a", 4, 5)
        f.write((HEADER.pack(len(body), 0, 4, 5) + body)[:20])
    assert list(read_rows(path)) == prefix

    path.write_bytes(kept)
    write_frames(path, [[row("a", 4, 4)]]).close()
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # corrupt the last frame's payload: its CRC no longer matches
    path.write_bytes(bytes(data))
    assert list(read_rows(path)) == prefix

    path.write_bytes(kept)
    write_frames(path, [[row("a", 6, 6)]]).close()  # seq 4 and 5 are missing
    assert list(read_rows(path)) == prefix
