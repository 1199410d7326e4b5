"""Scale and tallies of the chaos suites (a plain module: ``from chaos_scale import …``).

``make test`` runs every suite as a small seeded slice; ``make chaos`` sets
``HALO_CHAOS=full``. ``HALO_CHAOS_SEED=<seed>`` reruns exactly one seed (the one a
failure printed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

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


def suite(name: str) -> SuiteTally:
    """That suite's shared tally (many tests may add to it)."""
    return _TALLIES.setdefault(name, SuiteTally())


def tallies() -> dict[str, SuiteTally]:
    return dict(_TALLIES)


class TallyBook:
    """What the ``chaos_tally`` fixture gives: ``chaos_tally.suite(name)`` is :func:`suite`."""

    @staticmethod
    def suite(name: str) -> SuiteTally:
        return suite(name)
