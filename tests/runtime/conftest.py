"""Fixtures of the runtime tests; the helpers they share live in ``runtime_harness.py``.

Every test here gets a workspace (``tmp_path``) and, on the way out, a check that
no process started in that workspace is still alive: a test that runs shell
commands must leave nothing behind, even when it fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_harness import processes_in


@pytest.fixture(autouse=True)
def no_process_left_behind(tmp_path: Path) -> Iterator[None]:
    yield
    left = processes_in(tmp_path)
    for pid in left:  # do not let one failing test leak processes into the next
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes still running in the workspace: {left}"
