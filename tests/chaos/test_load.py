"""Suite 5, load: many trees and SSE clients for a while; nothing lost, memory settles.

Slice (``make test``): 20 trees, 80 SSE followers, a few seconds. Full (``make
chaos``): 100 trees, 1,000 SSE followers, 5 minutes, turns of 4-8 s with 1-3 s
between a driver's messages (a follower asks again 1-3 s after an idle answer). See
``load_harness`` for what runs and what is checked; the figures (RSS at each phase,
records, frames, connections, how long the followers took to catch up) are printed
with the result.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from chaos_scale import FULL, TallyBook, scale, seeds
from load_harness import LoadPlan, run_load

SUITE = "load"
MB = 1 << 20


@pytest.mark.parametrize("seed", seeds(5000, 1, 1))
async def test_many_trees_and_sse_clients_lose_nothing_and_memory_settles(
    seed: int, tmp_path: Path, chaos_tally: type[TallyBook]
) -> None:
    plan = LoadPlan(
        seed,
        trees=scale(20, 100),
        subscribers=scale(4, 10),
        warmup=20.0 if FULL else 1.0,
        duration=300.0 if FULL else 4.0,
        settle=20.0 if FULL else 2.0,
        count=(16, 32) if FULL else (3, 6),
        pause=(1.0, 3.0) if FULL else (0.1, 0.5),
        think=(1.0, 3.0) if FULL else (0.2, 1.0),
    )
    tally = chaos_tally.suite(SUITE)
    with trio.fail_after(scale(60, 600)):
        run = await run_load(plan, tmp_path)
    tally.runs += 1
    tally.faults += run.figures.get("SSE connections", 0)  # type: ignore[operator]
    tally.checks += run.checks
    shown = {
        k: (f"{v / MB:.1f} MB" if isinstance(v, int) and k.startswith("rss") else v)
        for k, v in run.figures.items()
    }
    print(f"seed {seed}, {plan.trees} trees x {plan.subscribers} followers: {shown}")
    print("samples (t, rss MB, listeners, streams, last_seq):")
    print(
        [
            (s.get("t"), round(s["rss"] / MB, 1), s["listeners"], s["streams"], s["last_seq"])
            for s in run.samples
        ]
    )
    if run.problems:
        tally.failures.append(f"seed {seed}: {run.problems[0]} (+{len(run.problems) - 1} more)")
    assert not run.problems, f"HALO_CHAOS_SEED={seed}: " + "\n".join(run.problems[:20])
