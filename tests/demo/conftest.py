"""Fixtures of the demo tests (the harness itself is ``demo_harness.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from halo_actors.demo.tour import leftover_processes


@pytest.fixture(autouse=True)
def no_process_left_behind(tmp_path: Path) -> Iterator[None]:
    """Fails a test that leaves any process running in its workspace."""
    yield
    assert leftover_processes(tmp_path.resolve()) == []
