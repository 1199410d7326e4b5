"""The runtime the crash-replay scenario kills: ``python -m halo_actors.demo.crash_child WS``.

It opens the embedded runtime on the workspace ``WS``, starts the planner tree
of :mod:`.scenarios.crash_replay`, queues the user's two notes behind the
planner's running turn, and prints every logged record as one JSON line on
stdout (flushed), so the demo can show it and pick the moment to SIGKILL it.
It starts no shell command (a killed runtime cannot reap one), and it exits by
itself after ``LIFETIME`` seconds, so it never outlives the demo for long.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from ..core.errors import SubscriptionClosed
from ..core.events import TextStreamed, ToolReturned, encode_record
from ..core.log import EventLog
from ..runtime.embed import open_runtime
from .scenarios.crash_replay import NOTES, PROFILES, TASK, crash_model

LIFETIME = 30.0
"""Seconds after which the child gives up waiting to be killed and exits."""


async def _print_records(log: EventLog, *, task_status: trio.TaskStatus[None]) -> None:
    try:
        async with log.subscribe() as records:
            task_status.started()
            async for record in records:
                sys.stdout.write(encode_record(record).decode() + "\n")
                sys.stdout.flush()
    except SubscriptionClosed:
        return


async def _both_streaming(log: EventLog, planner: str) -> None:
    """Until the planner streams its second step and its researcher streams too."""
    planner_started, streaming = False, set()
    async with log.subscribe() as records:
        async for record in records:
            sid, event = record.session_id, record.event
            planner_started = planner_started or (
                sid == planner and isinstance(event, ToolReturned)
            )
            if isinstance(event, TextStreamed) and (sid != planner or planner_started):
                streaming.add(sid)
            if len(streaming) == 2:
                return


async def run_child(workspace: Path) -> None:
    with trio.move_on_after(LIFETIME):
        async with (
            open_runtime(workspace, model=crash_model(), profiles=PROFILES) as sup,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(_print_records, sup.log)
            planner = await sup.create_session(
                namespace="demo", agent_id="planner", title="planner"
            )
            await sup.send(planner, TASK)
            await _both_streaming(sup.log, planner)
            for note in NOTES:
                await sup.send(planner, note)
            await trio.sleep_forever()


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m halo_actors.demo.crash_child WORKSPACE\n")
        return 2
    trio.run(run_child, Path(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
