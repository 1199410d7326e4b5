"""Stop, archive and delete of a subtree (a cascade), for the supervisor.

A cascade runs as the supervisor's own task and finishes even when its waiter is
cancelled (two turns stopping each other must not each wait, shielded, for the other).
See ``docs/design/actors.md``.

Invariants:
- every member of the subtree is resident (rebuilt from the log, and pinned) and marked
  ``stopping`` before any of it is aborted, with no checkpoint between listing the
  members and marking them, so no run that ends during the cascade reports to (and
  wakes) an ancestor, and no child born during it escapes;
- with a pipelined log, every member whose abort turn is free is aborted in the
  cascade's own task (``session.abort_together``), the cyclic GC paused while the cut
  runs unwind; a member already being aborted waits its turn in a task of its own;
- a cascade returns only once the log is durable up to its last record; a stop then
  gives every member with queued messages a run again. One that finds its target
  archived already returns only once that archive is durable (the cascade that logged
  it may still be waiting for it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

import outcome
import trio

from ..core import ids
from ..core.errors import SessionNotFound, SessionUnavailable
from ..core.events import SessionDeleted
from ..core.logger import get_logger
from .gcpause import GcPause
from .session import SessionActor, abort_together

if TYPE_CHECKING:
    from .supervisor import Supervisor

log = get_logger("halo_actors.supervisor")


class Cascades:
    """The supervisor's stops, archives and deletes."""

    def __init__(self, sup: Supervisor) -> None:
        self._sup = sup
        self._gc_pause = GcPause()
        """Pauses the cyclic GC while a cascade's runs unwind (``gcpause.py``)."""

    async def run(self, job: Callable[[], Awaitable[bool]]) -> bool:
        """Run a cascade as the supervisor's own task and wait for it.

        The cascade finishes even when its waiter is cancelled: a turn whose tool call
        stops a sibling can itself be stopped meanwhile (two turns stopping each other),
        and neither may then wait, shielded, for the other.
        """
        sup = self._sup
        done = trio.Event()
        result: outcome.Outcome[bool] | None = None
        waiting = True

        async def run() -> None:
            nonlocal result
            try:
                result = outcome.Value(await job())
            except Exception as exc:
                result = outcome.Error(exc)
                if not waiting:
                    log.error("cascade_failed", exc_info=exc)
            finally:
                done.set()  # a shutdown cancels the cascade and leaves no result

        sup._nursery.start_soon(run)
        try:
            await done.wait()
        finally:
            waiting = False
        if result is None:
            raise SessionUnavailable("the runtime is shutting down")
        return result.unwrap()

    async def delete_subtree(self, target: str) -> bool:
        sup = self._sup
        if not sup.registry.known(ids.check_session_id(target)):
            raise SessionNotFound(f"session {target} not found")
        members = sup.subtree(target)
        pinned = sup.registry.pin(members)  # resident from their activation to their deletion
        try:
            await self.abort_subtree(target, "archive")
            await sup.registry.activate_tree_members(members)  # an archived subtree is not
            for sid in reversed(members):
                actor = sup._actors.get(sid)
                if actor is None:  # a concurrent delete got there first
                    continue
                sup._unregister(sid)
                sup._deleted.add(sid)
                await actor.emit(SessionDeleted())
            await sup.log.wait_durable(sup.log.stamped_seq)
        finally:
            sup.registry.unpin(pinned)
        if ids.is_root(target):  # no node takes a deleted tree over (``ownership.py``)
            await sup.owner.deleted(target)
        return True

    async def abort_subtree(self, target: str, how: Literal["stop", "archive"]) -> bool:
        sup = self._sup
        if not sup.registry.known(ids.check_session_id(target)):
            raise SessionNotFound(f"session {target} not found")
        pinned: list[str] = []
        try:
            # Rebuild every passivated member (pinned: none is passivated again meanwhile),
            # then re-list: a child created during the reads is in the cascade too.
            members = sup.subtree(target)
            while passive := [s for s in members if s not in sup._actors]:
                pinned += sup.registry.pin(members)
                await sup.registry.activate_tree_members(passive)
                members = sup.subtree(target)
            return await self._abort_resident(target, members, how)
        finally:
            sup.registry.unpin(pinned)

    async def _abort_resident(
        self, target: str, members: list[str], how: Literal["stop", "archive"]
    ) -> bool:
        """The cascade once every one of ``members`` (listed with no checkpoint since) is
        resident; marks them all with no checkpoint between the listing and the marking."""
        sup = self._sup
        root = sup._actors.get(target)
        if root is None:  # deleted while its subtree was rebuilt
            raise SessionNotFound(f"session {target} not found")
        if root.state.lifecycle in ("archived", "deleted"):  # by a cascade that may not have
            await sup.log.wait_durable(root.state.last_seq)  # returned yet: durable first
            return False
        actors = [sup._actors[s] for s in members]
        for actor in actors:
            actor.aborts_pending += 1
        results: list[bool] = []

        def grace(agent_id: str) -> float:
            return sup._profile(agent_id).limits.kill_grace

        async def abort_one(actor: SessionActor) -> None:
            results.append(await actor.abort(how, grace(actor.agent_id)))

        # Pipelined, every session whose abort turn is free is aborted together in this
        # task, runs and all, with no task, lock or wait per session; one whose abort is
        # already under way (another cascade) gets a task of its own that waits its turn.
        ended = trio.Event()
        together = [a for a in actors if sup.log.pipelined and a.claim_abort_nowait(ended)]
        claimed = set(together)
        alone = [a for a in actors if a not in claimed]
        if alone:
            async with trio.open_nursery() as nursery:
                for actor in alone:
                    nursery.start_soon(abort_one, actor)
                results += await abort_together(together, how, grace, self._gc_pause, ended)
        else:
            results += await abort_together(together, how, grace, self._gc_pause, ended)
        await sup.log.wait_durable(max(a.state.last_seq for a in actors))
        sup._notify()
        for actor in actors:
            if how == "stop" and actor.state.mailbox and actor.claim_run():
                sup._start_run(actor)
        return any(results)
