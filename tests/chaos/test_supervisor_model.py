"""Chaos suite 3: a stateful model test of the supervisor against the tree rules.

Hypothesis generates programs (``tree_program.py``): trees, then direct calls on the
supervisor (send, hard interrupt, start a child, stop, archive, delete, new roots,
pauses) and, inside the messages, session tool calls the receiving sessions make
from their own turns on targets all over the runtime (themselves, ancestors, their
subtree, archived and deleted sessions, other trees, unknown and unsafe ids).
``tree_driver.py`` plays each program in one ``trio.run`` and the reference model
(``tree_rules.py``, ``tree_answers.py``, ``tree_live.py``) checks the result; see
``docs/reliability.md`` ("Supervisor model (suite 3)").

Each seed is one hypothesis search (``@seed``, no example database), so
``HALO_CHAOS_SEED=<seed>`` reruns the very same search; a failure also prints the
``@reproduce_failure`` blob of its shrunk example. Violations explained by a known,
still open runtime bug (``tree_bugs.py``) do not fail: they are counted in the
chaos report, one line per bug.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest
from chaos_scale import SuiteTally, scale, seeds, suite
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as with_seed
from tree_bugs import KNOWN_BUGS
from tree_driver import MEMORY, SQLITE, Backend, run_example
from tree_program import Program, programs

SUITE = "supervisor model"
MAX_OPS = 30
_known: Counter[str] = Counter()
"""Violations put down to each known bug, over the whole pytest run."""


def search(seed: int, backend: Backend, examples: int, tally: SuiteTally, tmp_path: Path) -> None:
    """One seeded hypothesis search of ``examples`` programs."""

    @with_seed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(program=programs(MAX_OPS))
    def example(program: Program) -> None:
        with tempfile.TemporaryDirectory(dir=tmp_path) as workspace:
            outcome = run_example(program, backend, Path(workspace))
        tally.runs += 1
        tally.checks += outcome.checks
        tally.faults += outcome.faults
        _known.update(outcome.known)
        broken = [str(v) for v in outcome.violations]
        assert not broken, "\n".join(broken[:25])

    try:
        example()
    except BaseException:
        tally.failures.append(f"{backend.name} seed {seed}: rerun with HALO_CHAOS_SEED={seed}")
        raise
    finally:
        _note_known_bugs(tally)


def _note_known_bugs(tally: SuiteTally) -> None:
    """One line per known bug in the report (replaced as the counts grow)."""
    tally.failures[:] = [f for f in tally.failures if not f.startswith("known bug ")]
    for bug, count in sorted(_known.items()):
        tally.failures.append(f"known bug {bug} ({count} violations): {KNOWN_BUGS[bug]}")


@pytest.mark.parametrize("seed", seeds(3_000, 1, 10))
def test_supervisor_keeps_the_tree_rules_on_a_memory_log(seed: int, tmp_path: Path) -> None:
    search(seed, MEMORY, scale(40, 1000), suite(SUITE), tmp_path)


@pytest.mark.parametrize("seed", seeds(3_500, 1, 5))
def test_supervisor_keeps_the_tree_rules_on_a_sqlite_log(seed: int, tmp_path: Path) -> None:
    search(seed, SQLITE, scale(3, 100), suite(SUITE), tmp_path)
