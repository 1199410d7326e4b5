"""What a demo scenario is: a name, a story, the play itself and what it taught.

Plain data shared by the stage (which plays scenarios) and the views (which
show them); no behaviour.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .stage import Stage


@dataclass(frozen=True)
class Scenario:
    name: str
    """What ``demo <name>`` takes (``fan-out``, ``crash-replay``, …)."""
    title: str
    """One line for the header and for ``demo --list``."""
    play: Callable[[Stage], Awaitable[None]]
    shown: tuple[str, ...]
    """The summary: what a run of this scenario demonstrated."""
    docs: tuple[str, ...]
    """Where to read more (paths under the repository)."""
    budget: float = 30.0
    """Seconds (at speed 1) after which the scenario is failed as stuck."""


@dataclass(frozen=True)
class Check:
    """A key outcome the scenario verified from the log or the process table."""

    label: str
    ok: bool
