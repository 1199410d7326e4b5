"""The demo's scenarios, one module each, in tour order."""

from __future__ import annotations

from ..scenario import Scenario
from . import crash_replay, fan_out, gates, hard_interrupt, soft_interrupt, stop_archive

SCENARIOS: tuple[Scenario, ...] = (
    fan_out.SCENARIO,
    soft_interrupt.SCENARIO,
    hard_interrupt.SCENARIO,
    stop_archive.SCENARIO,
    gates.SCENARIO,
    crash_replay.SCENARIO,
)
