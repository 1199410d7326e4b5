"""Each ACP test gets a real server (the ACP script), the fault proxy in front of it, and
adapters started on demand as subprocesses (``rig.adapter()``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from acp_harness import Rig, acp_model
from fault_proxy import FaultProxy
from web_client import serve_harness

from halo_actors.fronts.http.limits import TokenLimits


@pytest.fixture
async def rig(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    """``indirect`` parametrisation may pass ``TokenLimits`` for the server."""
    limits = getattr(request, "param", None)
    settings = {"limits": limits} if isinstance(limits, TokenLimits) else {}
    async with (
        serve_harness(tmp_path, model=acp_model(), **settings) as harness,
        trio.open_nursery() as nursery,
    ):
        proxy = FaultProxy(harness.server.port)
        await nursery.start(proxy.serve)
        yield Rig(harness, proxy, tmp_path)
        proxy.clear()
        nursery.cancel_scope.cancel()
