"""The chaos suites' report table and the ``chaos_tally`` fixture.

Scale, seeds and tallies live in ``chaos_scale.py`` (import from there, not from this
file: several conftest modules share the name). Each suite records runs, faults
injected, invariant checks and failures (with their seeds); the table is printed at
the end of the pytest run.
"""

from __future__ import annotations

import pytest
from chaos_scale import FULL, SuiteTally, TallyBook, scale, seeds, tallies

__all__ = ["FULL", "SuiteTally", "scale", "seeds"]


@pytest.fixture
def chaos_tally() -> type[TallyBook]:
    """``chaos_tally.suite("aborts mid-batch")`` returns that suite's shared tally."""
    return TallyBook


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = tallies()
    if not found:
        return
    write = terminalreporter.write_line
    terminalreporter.section(f"chaos report ({'full' if FULL else 'slice'})")
    header = f"{'suite':<28} {'runs':>7} {'faults':>8} {'checks':>9} {'failures':>9}"
    write(header)
    write("-" * len(header))
    for name, tally in sorted(found.items()):
        write(
            f"{name:<28} {tally.runs:>7} {tally.faults:>8} {tally.checks:>9} "
            f"{len(tally.failures):>9}"
        )
        for failure in tally.failures:
            write(f"    {failure}")
