"""Crash safety of the SQLite log, with a real process and a real SIGKILL.

``crash_writer.py`` appends from several concurrent producers and prints every seq
the log acknowledged. We kill it at a seeded random moment, a dozen times on the
same file, and after each kill check the file: it opens, every acknowledged seq is
there, seqs are strictly increasing with no duplicate, only an unacknowledged tail
was lost, and the next append's seq is above everything stored (no reuse).

Reproduce a failure with ``HALO_CRASH_SEED=<seed printed in the failure>``.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import trio

from halo_actors.core.events import TextStreamed, decode_records
from halo_actors.core.log import SqliteEventLog
from halo_actors.core.log.index import fold_index
from halo_actors.core.log.journal import journal_path, read_rows

WRITER = Path(__file__).with_name("crash_writer.py")
KILLS = 12
BUDGET = 40.0
"""Seconds for the whole test (it normally takes well under 20)."""
FIRST_ACK_BUDGET = 15.0


class WriterDied(AssertionError):
    """The writer exited on its own (it should only ever be killed)."""


async def run_and_kill(db: Path, seed: int, rng: random.Random, stderr_path: Path) -> list[int]:
    """Start the writer, SIGKILL it at a random moment, return the seqs it acknowledged."""
    early = rng.random() < 0.2  # sometimes before the first ack: during import, open or schema
    delay = rng.uniform(0.0, 0.3) if early else rng.uniform(0.05, 0.4)
    output = bytearray()
    first_ack = trio.Event()
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [sys.executable, str(WRITER), str(db), str(seed)],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        assert process.stdout is not None
        stdout = process.stdout

        async def pump() -> None:
            while chunk := await stdout.receive_some():
                output.extend(chunk)
                first_ack.set()
            first_ack.set()  # end of file: the writer is gone

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump)
            if not early:
                with trio.fail_after(FIRST_ACK_BUDGET):
                    await first_ack.wait()
            await trio.sleep(delay)
            if process.returncode is not None:
                raise WriterDied(
                    f"writer exited with {process.returncode}: {await trio.Path(stderr_path).read_text()}"
                )
            process.kill()
            await process.wait()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            with trio.move_on_after(5):
                await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()
    complete_lines = bytes(output).split(b"\n")[:-1]  # the last piece may be a torn line
    return [int(line) for line in complete_lines]


def stored_seqs(db: Path) -> list[int]:
    """Every record's seq in the file, batch by batch (a row holds a batch's records)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT body FROM batches ORDER BY seq")
        return [record.seq for (body,) in rows for record in decode_records(body)]


async def test_sigkill_never_loses_an_acknowledged_append_nor_reuses_a_seq(tmp_path: Path) -> None:
    seed = int(os.environ.get("HALO_CRASH_SEED", random.randrange(2**32)))
    print(f"crash test seed: {seed} (rerun with HALO_CRASH_SEED={seed})")
    rng = random.Random(seed)
    db = tmp_path / ".halo" / "events.db"
    high_water = 0  # the largest seq known stored (acknowledged or probed) so far
    last_ts = 0
    acknowledged_total = 0
    recovered_total = 0  # records a reopen found only in the journal (indexed on open)

    with trio.fail_after(BUDGET):
        for run in range(KILLS):
            where = f"seed {seed}, run {run}"
            acked = await run_and_kill(db, rng.randrange(2**31), rng, tmp_path / f"stderr{run}.txt")
            acknowledged_total += len(acked)
            assert len(set(acked)) == len(acked), f"{where}: the writer was given a seq twice"
            assert all(seq > high_water for seq in acked), f"{where}: an old seq was reused"

            indexed = await trio.to_thread.run_sync(stored_seqs, db) if db.exists() else []
            journaled = [
                r.seq for rows, _ in read_rows(journal_path(db), len(indexed)) for r in rows
            ]
            assert journaled == list(range(len(indexed) + 1, len(indexed) + len(journaled) + 1))
            recovered_total += len(journaled)
            log = await SqliteEventLog.open(db)
            try:
                assert journal_path(db).stat().st_size == 0, f"{where}: the journal was not cut"
                stored = await trio.to_thread.run_sync(stored_seqs, db)
                assert set(acked) <= set(stored), (
                    f"{where}: lost {sorted(set(acked) - set(stored))[:10]}"
                )
                assert stored == list(range(1, len(stored) + 1)), (
                    f"{where}: stored seqs are not 1..n (a crash may only lose an unacknowledged tail)"
                )
                assert log.last_seq == len(stored)
                index = {s.session_id: s for s in await log.session_index()}
                assert index == fold_index(await log.read()), (
                    f"{where}: the session index (its table and the tail past its mark) "
                    "is not the fold of the stored records"
                )

                new = await log.read(after_seq=high_water)  # decodes every record of this run
                assert [r.seq for r in new] == stored[high_water:], where
                stamps = [last_ts] + [r.ts for r in new]
                assert stamps == sorted(stamps), f"{where}: timestamps went back"

                (probe,) = await log.append("crash_probe", TextStreamed(text=f"after run {run}"))
                assert probe.seq == len(stored) + 1, (
                    f"{where}: next seq {probe.seq} reuses or skips"
                )
                assert probe.seq > max(acked, default=0)
                print(
                    f"run {run}: {len(acked)} acknowledged, {len(stored)} stored in all,"
                    f" {len(journaled)} of them recovered from the journal"
                )
                high_water, last_ts = probe.seq, probe.ts
            finally:
                await log.aclose()

    assert acknowledged_total > 0, f"seed {seed}: the writer never acknowledged anything"
    assert recovered_total > 0, f"seed {seed}: no kill left records only in the journal"
