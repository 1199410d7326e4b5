"""Chaos suite 1: aborts mid-batch. Seeded random trees under faults; see abort_driver."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from abort_driver import RUN_BUDGET, play
from chaos_scale import TallyBook, scale, seeds

FAULTS_PER_RUN = scale(15, 25)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_no_abort_loses_a_message_corrupts_history_or_leaves_a_process(
    tmp_path: Path, backend: str, chaos_tally: type[TallyBook]
) -> None:
    tally = chaos_tally.suite("aborts mid-batch")
    base = 1_000 if backend == "memory" else 2_000
    failures = []
    for seed in seeds(base, 8, 300):
        workspace = tmp_path / f"seed{seed}"
        workspace.mkdir()
        with trio.fail_after(RUN_BUDGET + 10):
            try:
                outcome = await play(
                    seed, workspace, sqlite=backend == "sqlite", faults=FAULTS_PER_RUN
                )
            except AssertionError as exc:
                failures.append(str(exc).splitlines()[0])
                tally.failures.append(f"{backend} {str(exc).splitlines()[0]}")
                continue
            finally:
                tally.runs += 1
        tally.faults += outcome.faults_fired
        tally.checks += outcome.checks
    assert not failures, "rerun one with HALO_CHAOS_SEED=<seed>:\n" + "\n".join(failures)
