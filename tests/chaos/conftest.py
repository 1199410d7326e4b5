"""The chaos suites' shared scale switch and report table.

``make test`` runs every suite as a small seeded slice; ``make chaos`` sets
``HALO_CHAOS=full`` and runs them at full size. Each suite records what it did in a
:class:`SuiteTally` (runs, faults injected, invariant checks, failures with their
seeds); the table is printed at the end of the pytest run.

A failing run must name its seed: ``HALO_CHAOS_SEED=<seed>`` reruns exactly that run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

FULL = os.environ.get("HALO_CHAOS") == "full"
"""True under ``make chaos``: suites run at full size."""

SEED_OVERRIDE = os.environ.get("HALO_CHAOS_SEED")
"""Set to rerun one seed (the one a failure printed)."""


def scale(slice_size: int, full_size: int) -> int:
    """How many runs a suite does: ``slice_size`` in ``make test``, ``full_size`` in chaos."""
    return full_size if FULL else slice_size


def seeds(base: int, slice_size: int, full_size: int) -> list[int]:
    """The seeds a suite runs: one override if ``HALO_CHAOS_SEED`` is set, else a range."""
    if SEED_OVERRIDE is not None:
        return [int(SEED_OVERRIDE)]
    return list(range(base, base + scale(slice_size, full_size)))


@dataclass
class SuiteTally:
    """What one suite did; many tests may add to the same suite's tally."""

    runs: int = 0
    faults: int = 0
    checks: int = 0
    failures: list[str] = field(default_factory=list)
    """One entry per failed run, naming its seed."""


_TALLIES: dict[str, SuiteTally] = {}


@pytest.fixture
def chaos_tally() -> type[_TallyBook]:
    """``chaos_tally.suite("aborts mid-batch")`` returns that suite's shared tally."""
    return _TallyBook


class _TallyBook:
    @staticmethod
    def suite(name: str) -> SuiteTally:
        return _TALLIES.setdefault(name, SuiteTally())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _TALLIES:
        return
    write = terminalreporter.write_line
    mode = "full" if FULL else "slice"
    terminalreporter.section(f"chaos report ({mode})")
    header = f"{'suite':<28} {'runs':>7} {'faults':>8} {'checks':>9} {'failures':>9}"
    write(header)
    write("-" * len(header))
    for name, tally in sorted(_TALLIES.items()):
        write(
            f"{name:<28} {tally.runs:>7} {tally.faults:>8} {tally.checks:>9} "
            f"{len(tally.failures):>9}"
        )
        for failure in tally.failures:
            write(f"    {failure}")
