"""A real hypercorn server on 127.0.0.1 port 0 per test (``harness``), shut down after it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from web_client import Harness, serve_harness


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve_harness(tmp_path) as harness:
        yield harness
