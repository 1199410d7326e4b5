"""Running a call that a hard interrupt may have to leave behind.

A built-in tool ends promptly when cancelled (a shell command's process group is
killed within its grace). An embedder's tool may not: it may block in a thread,
shield itself, or swallow ``Cancelled``. :func:`run_abandonable` runs such a call as
a task of a nursery the runtime owns and waits for it; when the waiter is
cancelled it cancels the call and waits at most a grace period, then lets the
waiter go on. The call's task stays owned (by that nursery, which waits for it
at the runtime's exit: trio cannot kill a task); its late result is dropped, with
a warning.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from ..core.logger import get_logger

log = get_logger("halo_actors.tools")

T = TypeVar("T")


async def run_abandonable(
    tasks: trio.Nursery, grace: float, call: Callable[[], Awaitable[T]], label: str, cut: T
) -> T:
    """Run ``call`` as a task of ``tasks``; when this waiter is cancelled, cancel it and
    wait at most ``grace`` seconds for it to end, then leave it (it stays owned by
    ``tasks``, and whatever it returns is dropped). ``call`` must not raise."""
    done = trio.Event()
    scope = trio.CancelScope()
    result: list[T] = []
    abandoned = False

    async def body() -> None:
        try:
            with scope:
                result.append(await call())
        finally:
            done.set()
            if abandoned:
                log.warning("abandoned_tool_ended", tool=label, result_dropped=bool(result))

    tasks.start_soon(body)
    try:
        await done.wait()
    except trio.Cancelled:
        scope.cancel()
        with trio.CancelScope(shield=True), trio.move_on_after(grace):
            await done.wait()
        if not done.is_set():
            abandoned = True
            log.warning("tool_abandoned", tool=label, grace=grace)
        raise
    if not result:  # its task was cancelled from outside: the runtime is closing
        await trio.lowlevel.checkpoint()  # raises Cancelled when this task is cancelled too
        return cut
    return result[0]
