"""Pausing the cyclic garbage collector while a cascade cuts many runs at once.

A stop of a big tree cancels thousands of suspended runs in a few scheduler passes;
each cut allocates (a ``Cancelled`` and its traceback per task, closing records), and
those allocations trigger full collections of the whole heap, which then holds every
suspended run's coroutine stack: measured, more than half of a 10,000-session stop
(``docs/benchmarks.md``). Nothing a cut frees is cyclic garbage that has to go at once:
the runs' frames are freed by reference counting as they unwind.

Invariants:
- the collector is paused only if it was enabled, and re-enabled when the last pause
  that paused it ends (pauses nest and may overlap across tasks);
- a pause is bounded in time by its caller (the cascade lifts it once its runs have
  ended, or after ``GC_PAUSE_SECONDS``, whichever comes first), so a cascade that waits
  long (a command's kill grace, a compaction's) never runs the process without it for
  long;
- a collector disabled by the embedder stays disabled: nothing here enables it.

See ``docs/design/actors.md`` (stop, archive, delete).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

GC_PAUSE_SECONDS = 2.0
"""The longest a cascade keeps the collector paused while it waits for its runs."""


class GcPause:
    """One per supervisor: counts the pauses in progress and whether it paused the GC."""

    __slots__ = ("_active", "_paused_it")

    def __init__(self) -> None:
        self._active = 0
        self._paused_it = False

    @contextmanager
    def paused(self) -> Iterator[None]:
        if self._active == 0 and gc.isenabled():
            gc.disable()
            self._paused_it = True
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if self._active == 0 and self._paused_it:
                self._paused_it = False
                gc.enable()

    @property
    def active(self) -> bool:
        return self._active > 0
