"""Suite: nodes sharing PostgreSQL under kill -9 and SIGSTOP (``node_chaos.py`` says what
is checked). ``make test-pg`` (and so ``make test``) runs a small seeded slice: 8 trees,
2 faults; ``make chaos`` the full size: 100 trees, 12 faults per seed.

Rerun one seed with ``HALO_CHAOS_SEED=<seed>``.
"""

from __future__ import annotations

import pytest
import trio
from chaos_scale import FULL, TallyBook, scale, seeds
from node_chaos import NodesPlan, run_nodes
from pg_nodes import Cluster

pytestmark = pytest.mark.pg

SUITE = "nodes: kill -9, SIGSTOP"


@pytest.mark.parametrize("seed", seeds(7000, 1, 3))
async def test_nodes_killed_and_stalled_under_load_lose_no_acknowledged_message(
    seed: int, cluster: Cluster, chaos_tally: type[TallyBook]
) -> None:
    plan = NodesPlan(
        seed,
        trees=scale(8, 100),
        messages=scale(30, 500),
        clients=scale(4, 12),
        faults=scale(2, 12),
        followers=scale(3, 10),
    )
    tally = chaos_tally.suite(SUITE)
    with trio.fail_after(scale(150, 900)):
        run = await run_nodes(plan, cluster)
    tally.runs += 1
    tally.faults += len(run.faults)
    tally.checks += run.checks
    print(
        f"seed {seed}{' (full)' if FULL else ''}: {run.checks} checks; faults {run.faults}; "
        + ", ".join(f"{k} {v}" for k, v in run.figures.items())
    )
    for problem in run.problems[:20]:
        print("PROBLEM", problem)
    if run.problems:
        tally.failures.append(f"seed {seed}: {run.problems[0]} (+{len(run.problems) - 1} more)")
    assert not run.problems, f"HALO_CHAOS_SEED={seed}: " + "\n".join(run.problems[:20])
