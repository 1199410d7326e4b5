"""The load suite's server: the HTTP front in a process of its own, with a stats line.

Usage: ``python tests/chaos/load_server.py WORKSPACE STATE_DIR``

It serves like ``python -m halo_actors serve`` (demo agent, port 0, prints the
same ``… listening on URL`` line) and answers each ``stats`` line on stdin with one JSON line: the process's RSS, the log's live listeners, the open SSE/WebSocket
streams, the log's last seq, sessions and running sessions. End of stdin (or
SIGTERM) shuts it down cleanly. Memory is measured in this process alone, so the
clients' own memory never counts.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import signal
import sys
import tracemalloc
from pathlib import Path

import trio

from halo_actors.core.log import LogBase
from halo_actors.fronts.http.app import FrontSettings
from halo_actors.fronts.http.limits import load_test_limits
from halo_actors.fronts.http.server import RunningServer, open_server
from halo_actors.fronts.http.tokens import TokenStore
from halo_actors.logging import configure_logging
from halo_actors.runtime.supervisor import Supervisor


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def listeners(sup: Supervisor) -> int:
    log = sup.log
    assert isinstance(log, LogBase), log
    return log.subscriber_count


def stats(server: RunningServer) -> dict[str, int]:
    runtimes = server.front.runtimes.opened().values()
    return {
        "rss": rss_bytes(),
        "listeners": sum(listeners(sup) for sup in runtimes),
        "streams": server.front.open_streams,
        "last_seq": sum(sup.log.last_seq for sup in runtimes),
        "sessions": sum(len(sup.sessions()) for sup in runtimes),
        "running": sum(
            sum(sup.is_running(s.session_id) for s in sup.sessions()) for sup in runtimes
        ),
    }


def heap() -> dict[str, int]:
    """The live Python heap after a full collection: allocated blocks, tracked objects.
    (RSS keeps the allocator's high-water mark; this shows what is still in use.)"""
    gc.collect()
    return {"blocks": sys.getallocatedblocks(), "objects": len(gc.get_objects())}


def top_allocations(limit: int = 25) -> dict[str, int]:
    """The biggest live allocation sites (by file:line), after a full collection."""
    gc.collect()
    if not tracemalloc.is_tracing():
        return {}
    stats = tracemalloc.take_snapshot().statistics("lineno")
    return {str(s.traceback[0]): s.size for s in stats[:limit]}


async def main(workspace: Path, state: Path) -> None:
    limits = load_test_limits()  # one token plays every load client
    settings = FrontSettings(tokens=TokenStore(state), keepalive=5.0, limits=limits)
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with open_server(settings, workspaces=(workspace,)) as server, stdin:
            print(f"halo_actors http front listening on {server.url}", flush=True)
            async with trio.open_nursery() as nursery:

                async def on_sigterm() -> None:
                    async for _ in signals:
                        nursery.cancel_scope.cancel()

                nursery.start_soon(on_sigterm)
                pending = b""
                while chunk := await stdin.receive_some():
                    pending += chunk
                    while b"\n" in pending:
                        line, pending = pending.split(b"\n", 1)
                        if line.strip() == b"stats":
                            print(json.dumps(stats(server)), flush=True)
                        elif line.strip() == b"heap":
                            print(json.dumps(heap()), flush=True)
                        elif line.strip() == b"top":  # PYTHONTRACEMALLOC=1: where memory went
                            print(json.dumps(top_allocations()), flush=True)
                nursery.cancel_scope.cancel()


if __name__ == "__main__":
    configure_logging()  # warnings and errors, to stderr, like ``python -m halo_actors``
    profile_to = os.environ.get("HALO_LOAD_PROFILE")  # a diagnostic: cProfile to this file
    profiler = cProfile.Profile() if profile_to else None
    if profiler is not None:
        profiler.enable()
    try:
        trio.run(main, Path(sys.argv[1]).resolve(), Path(sys.argv[2]))
    finally:
        if profiler is not None and profile_to:
            profiler.disable()
            profiler.dump_stats(profile_to)
