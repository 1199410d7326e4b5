"""The demo tour: small scripted trees on a throw-away (or given) workspace."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

from ..runtime.embed import open_runtime
from .feed import print_feed


async def fan_out(workspace: Path, *, as_json: bool) -> None:
    """A root spawns two workers; each reports back; the root answers when they are done."""
    async with open_runtime(workspace) as supervisor, trio.open_nursery() as nursery:
        nursery.start_soon(lambda: print_feed(supervisor.log, as_json=as_json))
        root = await supervisor.create_session(namespace="demo", title="fan-out")
        await supervisor.send(root, "spawn 2 summarise the workspace")
        with trio.fail_after(30):
            await supervisor.wait_idle(root)
        await trio.sleep(0.05)  # let the feed print the last events
        nursery.cancel_scope.cancel()


def run_demo(workspace: str | None, *, as_json: bool) -> int:
    if workspace is not None:
        trio.run(lambda: fan_out(Path(workspace), as_json=as_json))
        return 0
    with tempfile.TemporaryDirectory(prefix="halo-demo-") as tmp:
        trio.run(lambda: fan_out(Path(tmp), as_json=as_json))
    sys.stdout.flush()
    return 0
