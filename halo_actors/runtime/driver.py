"""The run loop of one session: rounds, turns, and the compactions between them.

A run drains a round, runs a turn, and repeats while the mailbox (or a resume kick)
has work; the supervisor owns the run's task, its crash handling and the reports
up the tree (see ``supervisor.py``), and hands this loop what it needs from the
tree: the tools' ``TreeControl`` and a callback for the end of each turn.

Invariants:
- compaction replaces everything before the last user message with a model-written
  summary, and clears ``is_compacting`` on every exit, a cut included; a cut of the
  turn (stop, hard interrupt) leaves one under way ``compaction_grace`` seconds to
  finish before it is abandoned;
- mid-turn compaction happens only at a batch boundary (no tool call open), and at
  the end of a turn only when the session was not stopped meanwhile;
- what follows a turn (its report, a compaction) is shielded: a hard interrupt cuts
  the turn, never the bookkeeping after it.

See ``docs/design/turns.md`` (batch boundaries) and ``docs/design/actors.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

import trio

from ..agent.model import (
    Model,
    ModelContextExceeded,
    ModelFailed,
    ModelRejected,
    ModelRequest,
    ModelTimeout,
    RoundInfo,
    Stop,
    TextDelta,
    open_stream,
)
from ..agent.repair import repair
from ..agent.turn import TurnSetup
from ..core.access import Access, weakest
from ..core.conversation import Message
from ..core.events import Compacted, FlagsChanged, Notified, RoundStarted
from ..tools.base import ToolContext, TreeControl
from ..tools.builtin import WRITING_TOOLS
from ..tools.files import Workspace
from ..tools.registry import ToolRegistry, Toolset
from ..tools.sandbox import Sandbox, ShellConfinement
from ..tools.shell import ShellLimits
from .profiles import AgentProfile
from .session import SessionActor

TurnEnded = Callable[[SessionActor, AgentProfile, str], Awaitable[None] | None]
"""Called after each turn that was not stopped, with its stop reason: decides at once
(no await) and returns the report to send, awaited shielded, or None when none is owed."""


AccessOf = Callable[[SessionActor], Access]
"""The session's own access level (recorded at creation, or the runtime's default)."""

MAX_SETUPS = 256
"""Sessions whose last turn setup is kept for their next turn."""
MAX_SHARED = 64
"""Profile and access pairs whose shared turn parts are kept (profiles are few)."""


class _Shared(NamedTuple):
    """What every turn under one profile and access level shares (all immutable)."""

    shell: ShellLimits
    confinement: ShellConfinement
    toolset: Toolset


class RunDriver:
    def __init__(
        self,
        model: Model,
        workspace: Workspace,
        tree: TreeControl,
        turn_ended: TurnEnded,
        below_busy: Callable[[str], bool],
        *,
        tools: ToolRegistry,
        tool_tasks: trio.Nursery,
        access_of: AccessOf,
        sandbox: Sandbox,
    ) -> None:
        self.model = model
        self.workspace = workspace
        self.tree = tree
        self.turn_ended = turn_ended
        self.below_busy = below_busy
        """Whether a run is alive below a session (read as each turn starts)."""
        self.tools = tools
        self.tool_tasks = tool_tasks
        """Where custom tools run (a hard interrupt may have to leave one behind)."""
        self.access_of = access_of
        self.sandbox = sandbox
        self._shared_parts: dict[tuple[int, Access], tuple[AgentProfile, _Shared]] = {}
        """What turns share per profile and access level (the profile kept: ids are reused)."""
        self._setups: dict[str, tuple[SessionActor, AgentProfile, TurnSetup]] = {}
        """The last turn setup of recently active sessions (bounded by ``MAX_SETUPS``),
        valid while its actor and profile are the same objects."""

    async def drive(self, actor: SessionActor, profile: AgentProfile, compact_first: bool) -> None:
        """One run, to its end (``agent_done``); a manual compaction comes first if asked."""
        actor.owed_interim = ""  # a stopped run's owed answer is not carried into this one
        if compact_first:
            await self.compact(actor, profile)
        round_event = await actor.open_round("opening")
        while round_event is not None:
            reason = await self._one_turn(actor, profile, round_event)
            round_event = await actor.complete_turn(reason)

    async def _one_turn(
        self, actor: SessionActor, profile: AgentProfile, round_event: RoundStarted
    ) -> str:
        """Run one turn and what follows it (reports, compaction); returns its stop reason."""
        actor.waited_on_children = self.below_busy(actor.session_id)
        reason = await actor.run_turn(
            self._setup(actor, profile), round_event, lambda: self._at_boundary(actor, profile)
        )
        if actor.stopping:
            return reason
        report = self.turn_ended(actor, profile, reason)
        limit = profile.limits.compress_at
        if report is None and not actor.compact_requested and actor.state.context_tokens <= limit:
            return reason  # nothing follows the turn: no await, so nothing to shield
        with trio.CancelScope(shield=True):
            if report is not None:
                await report
            over = actor.state.context_tokens > limit
            if (over or actor.compact_requested) and not actor.stopping:
                await self.compact(actor, profile)
        return reason

    def _setup(self, actor: SessionActor, profile: AgentProfile) -> TurnSetup:
        """The turn's tools, their context and limits. What depends only on the profile
        and the access level is built once per pair (:meth:`_shared`); a session's whole
        setup is kept for its next turn here, not on the actor, which a setup refers to
        (no cycle through the actor: passivation frees it by reference counting)."""
        found = self._setups.get(actor.session_id)
        if found is not None and found[0] is actor and found[1] is profile:
            return found[2]
        access = self.capability(actor, profile)
        shared = self._shared(profile, access)
        limits = profile.limits
        context = ToolContext(
            session_id=actor.session_id,
            agent_id=actor.agent_id,
            workspace=self.workspace,
            tree=self.tree,
            turn=actor,
            shell=shared.shell,
            tasks=self.tool_tasks,
            access=access,
            confinement=shared.confinement,
        )
        setup = TurnSetup(
            model=self.model,
            tools=shared.toolset.tools,
            specs=shared.toolset.specs,
            tool_context=context,
            system=profile.system,
            max_steps=limits.max_steps,
            max_parallel_tools=limits.max_parallel_tools,
            context_window=limits.max_tokens,
            context_tokens=lambda: actor.state.context_tokens,
            make_room=lambda: self.make_room(actor, profile),
        )
        if len(self._setups) >= MAX_SETUPS:
            self._setups.clear()
        self._setups[actor.session_id] = (actor, profile, setup)
        return setup

    def _shared(self, profile: AgentProfile, access: Access) -> _Shared:
        """The shell limits, confinement and tool set of ``profile`` at ``access`` (all
        immutable): built on first use, then kept while the profile object lives (a reload
        makes a new one, so a changed profile is never served stale)."""
        key = (id(profile), access)
        found = self._shared_parts.get(key)
        if found is not None and found[0] is profile:
            return found[1]
        limits = profile.limits
        names = profile.tools
        if access == "readonly":  # absent, not merely refused: the model never sees them
            names = tuple(name for name in names if name not in WRITING_TOOLS)
        shared = _Shared(
            shell=ShellLimits(
                output_cap=limits.shell_output_cap,
                timeout=limits.shell_timeout,
                kill_grace=limits.kill_grace,
            ),
            confinement=ShellConfinement(self.sandbox, profile.network, limits.max_processes),
            toolset=self.tools.toolset(tuple(names)),
        )
        if len(self._shared_parts) >= MAX_SHARED:  # reloaded profiles: drop the old ones
            self._shared_parts.clear()
        self._shared_parts[key] = (profile, shared)
        return shared

    def capability(self, actor: SessionActor, profile: AgentProfile) -> Access:
        """What the session's tools may do: its level, lowered by a sandboxing profile."""
        ceiling: Access = "workspace" if profile.sandbox == "workspace" else "full"
        return weakest(self.access_of(actor), ceiling)

    async def _at_boundary(self, actor: SessionActor, profile: AgentProfile) -> bool:
        """The batch-boundary hook: compact if over budget; True if the turn must yield."""
        if actor.state.context_tokens > profile.limits.compress_at:
            await self.compact(actor, profile)
        return actor.state.interrupt_requested

    async def make_room(self, actor: SessionActor, profile: AgentProfile) -> bool:
        """A compaction inside a turn, asked for by the context window (before a model
        call, no tool call open); False when nothing could be compacted or it failed."""
        try:
            return await self.compact(actor, profile)
        except (ModelFailed, ModelTimeout, ModelRejected, ModelContextExceeded) as exc:
            await actor.emit(Notified(text=f"compaction failed: {exc}"))
            return False

    async def compact(self, actor: SessionActor, profile: AgentProfile) -> bool:
        """Summarise everything before the last user message; False if there was nothing
        (or the compaction was abandoned). Shielded from a cut of the turn: a stop or hard
        interrupt leaves a compaction under way ``compaction_grace`` seconds to finish,
        then abandons it (``docs/design/turns.md``)."""
        messages = actor.state.messages
        starts = [i for i, m in enumerate(messages) if m.role == "user" and m.text()]
        replaced = starts[-1] if starts else 0
        if replaced <= 0:
            return False
        with actor.compaction_shield(profile.limits.compaction_grace):
            await actor.emit(FlagsChanged(is_compacting=True))
            try:
                summary = await self._summarize(actor, profile, tuple(messages[:replaced]))
                await actor.emit(Compacted(summary=summary, replaced=replaced))
                actor.compact_requested = False
                return True
            finally:
                with trio.CancelScope(shield=True):
                    await actor.emit(FlagsChanged(is_compacting=False))
        return False  # abandoned: its turn was cut and the grace ran out

    async def _summarize(
        self, actor: SessionActor, profile: AgentProfile, messages: tuple[Message, ...]
    ) -> str:
        request = ModelRequest(
            session_id=actor.session_id,
            agent_id=actor.agent_id,
            system=profile.system,
            messages=tuple(repair(list(messages))),
            tools=self.tools.toolset(tuple(profile.tools)).specs,
            step=0,
            purpose="compact",
            round=RoundInfo(text="compact", kind="drained"),
        )
        parts = []
        async with open_stream(self.model, request) as stream:
            async for item in stream:
                if isinstance(item, TextDelta):
                    parts.append(item.text)
                elif isinstance(item, Stop):
                    break
        return "".join(parts)
