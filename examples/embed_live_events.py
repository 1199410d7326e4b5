"""Embedding with live events: run an agent tree and print what happens as it happens.

    python examples/embed_live_events.py [WORKSPACE]

The built-in scripted agent (no model needed) spawns two sub-sessions; a second
task follows the whole tree's events from the log (a catch-up subscription: what
is stored, then the live tail) until the tree is idle.
"""

from __future__ import annotations

import sys

import trio

from halo_actors import (
    EventFilter,
    ReportSent,
    SessionCreated,
    SubscriptionClosed,
    Supervisor,
    TextStreamed,
    ToolCalled,
    TurnCompleted,
    open_runtime,
)


class Progress:
    """How far the follower has read: lets the program stop it only once it caught up."""

    def __init__(self) -> None:
        self.seq = 0
        self.moved = trio.Event()

    def reached(self, seq: int) -> None:
        self.seq = seq
        self.moved.set()
        self.moved = trio.Event()

    async def wait_for(self, seq: int) -> None:
        while self.seq < seq:
            await self.moved.wait()


async def follow(sup: Supervisor, root: str, progress: Progress) -> None:
    """Print the tree's events, one line each, until cancelled."""
    async with sup.log.subscribe(EventFilter(tree=root)) as events:
        try:
            async for record in events:
                progress.reached(record.seq)
                who = record.session_id.removeprefix(root) or "root"
                match record.event:
                    case SessionCreated(agent_id=agent):
                        print(f"#{record.seq:<4} {who:<22} created ({agent})")
                    case ToolCalled(tool_name=name):
                        print(f"#{record.seq:<4} {who:<22} calls {name}")
                    case TextStreamed(text=text):
                        print(f"#{record.seq:<4} {who:<22} streams {text.strip()!r}")
                    case ReportSent(kind=kind):
                        print(f"#{record.seq:<4} {who:<22} reports up ({kind})")
                    case TurnCompleted(stop_reason=reason, batch_boundary=False):
                        print(f"#{record.seq:<4} {who:<22} turn ended: {reason}")
        except SubscriptionClosed:
            pass  # the log closed


async def main(workspace: str) -> None:
    async with open_runtime(workspace) as sup:
        root = await sup.create_session(namespace="example")
        progress = Progress()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow, sup, root, progress)
            await sup.send(root, "spawn 2 look around")
            await sup.wait_idle(root)  # the whole tree is quiet
            last = (await sup.log.read(EventFilter(tree=root)))[-1].seq
            await progress.wait_for(last)  # the follower printed everything logged so far
            nursery.cancel_scope.cancel()
        print("final answer:", sup.output(root))


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "example-workspace")
