"""Session tools: start, query, interrupt, stop, archive, read and list sessions.

**The tree-scoped gates live here** (see ``docs/design/gates.md``), not in the
supervisor, whose methods also serve already-authorised callers:
- a target in another tree is refused exactly like an unknown one, with the
  same bytes: ``{"code": 1, "error": "session <id> not found"}``;
- ``stop_session`` / ``archive_session`` refuse the caller's own session and its
  ancestors (their cascade would wait for the very turn making the call);
- ``interrupt_session`` on self or an ancestor is allowed (fire-and-forget);
- ``start_session`` only starts agent profiles in the caller's team.
Every answer is one JSON object: ``{"code": 0, …}`` or ``{"code": 1, "error": …}``,
also when the target is archived or deleted *after* the gate passed it (an archive
racing the call): that target gets the gate's "not found".
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ..core import ids
from ..core.errors import SessionNotFound, SessionUnavailable
from .base import Delivery, Tool, ToolContext, ToolOutput, define_tool

_json = msgspec.json.Encoder()


def _ok(**fields: object) -> ToolOutput:
    return ToolOutput(_json.encode({"code": 0, **fields}).decode())


def _refuse(error: str) -> ToolOutput:
    return ToolOutput(_json.encode({"code": 1, "error": error}).decode(), is_error=True)


def _not_found(target: str) -> ToolOutput:
    return _refuse(f"session {target} not found")


def _visible(ctx: ToolContext, target: str) -> bool:
    """The one gate every by-id tool passes: a live session in the caller's own tree."""
    return (
        ids.is_safe_session_id(target)
        and ids.same_tree(target, ctx.session_id)
        and ctx.tree.is_live(target)
    )


class StartArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    task: str
    agent: str = "default"
    label: str = ""


async def _start(ctx: ToolContext, args: StartArgs) -> ToolOutput:
    if args.agent not in ctx.tree.team_of(ctx.agent_id):
        return _refuse(f"agent profile {args.agent!r} is not in your team")
    if not args.task.strip():
        return _refuse("task is empty")
    try:
        child = await ctx.tree.start_child(
            ctx.session_id, args.agent, args.task, args.label, wait=False
        )
    except SessionUnavailable as exc:  # the caller's own session is being stopped
        return _refuse(str(exc))
    return _ok(sessionId=child, status="started")


class QueryArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    session_id: str
    message: str
    interrupt: bool = False


async def _query(ctx: ToolContext, args: QueryArgs) -> ToolOutput:
    if not _visible(ctx, args.session_id):
        return _not_found(args.session_id)
    if args.session_id == ctx.session_id:
        return _refuse("cannot query your own session")
    mode: Literal["soft", "hard"] = "hard" if args.interrupt else "soft"
    return await _deliver(ctx, args.session_id, args.message, mode)


async def _deliver(
    ctx: ToolContext, target: str, message: str, mode: Literal["soft", "hard"]
) -> ToolOutput:
    """Send to a target the gate passed; one archived or deleted since is not found."""
    try:
        delivery: Delivery = await ctx.tree.send(target, message, source=ctx.session_id, mode=mode)
    except (SessionNotFound, SessionUnavailable):
        return _not_found(target)
    return _ok(sessionId=target, status=delivery)


class TargetArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    session_id: str


class InterruptArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    session_id: str
    message: str = "[interrupted] Stop what you are doing and read the messages queued for you."


async def _interrupt(ctx: ToolContext, args: InterruptArgs) -> ToolOutput:
    if not _visible(ctx, args.session_id):
        return _not_found(args.session_id)
    return await _deliver(ctx, args.session_id, args.message, "hard")


def _refuse_own_line(ctx: ToolContext, target: str, verb: str) -> ToolOutput | None:
    if not _visible(ctx, target):
        return _not_found(target)
    if ids.is_self_or_ancestor(target, ctx.session_id):
        what = "your own session" if target == ctx.session_id else "an ancestor of your session"
        return _refuse(f"cannot {verb} {what} ({target}): it would wait for this very turn")
    return None


async def _stop(ctx: ToolContext, args: TargetArgs) -> ToolOutput:
    refused = _refuse_own_line(ctx, args.session_id, "stop")
    if refused is not None:
        return refused
    try:
        stopped = await ctx.tree.stop(args.session_id)
    except SessionNotFound:  # deleted since the gate passed it
        return _not_found(args.session_id)
    return _ok(sessionId=args.session_id, stopped=stopped)


async def _archive(ctx: ToolContext, args: TargetArgs) -> ToolOutput:
    refused = _refuse_own_line(ctx, args.session_id, "archive")
    if refused is not None:
        return refused
    try:
        await ctx.tree.archive(args.session_id)
    except SessionNotFound:  # deleted since the gate passed it
        return _not_found(args.session_id)
    return _ok(sessionId=args.session_id, archived=True)


async def _output(ctx: ToolContext, args: TargetArgs) -> ToolOutput:
    if not _visible(ctx, args.session_id):
        return _not_found(args.session_id)
    return _ok(sessionId=args.session_id, output=ctx.tree.output(args.session_id))


class NoArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


async def _list(ctx: ToolContext, args: NoArgs) -> ToolOutput:
    return _ok(sessions=ctx.tree.describe_tree(ids.root_of(ctx.session_id)))


SESSION_TOOLS: tuple[Tool, ...] = (
    define_tool(
        "start_session",
        "Start a sub-session (child agent) with a task; it reports back when done.",
        StartArgs,
        _start,
    ),
    define_tool(
        "query_session",
        "Send a message to a session of your tree (interrupt=true aborts its current turn).",
        QueryArgs,
        _query,
    ),
    define_tool(
        "interrupt_session",
        "Abort a session's current turn now and give it a message.",
        InterruptArgs,
        _interrupt,
    ),
    define_tool(
        "stop_session",
        "Stop a sub-session and its subtree; queued messages are kept.",
        TargetArgs,
        _stop,
    ),
    define_tool(
        "archive_session",
        "Archive a sub-session and its subtree; queued messages are discarded.",
        TargetArgs,
        _archive,
    ),
    define_tool(
        "get_session_output", "Read the last output of a session of your tree.", TargetArgs, _output
    ),
    define_tool("list_sessions", "List the sessions of your tree with their state.", NoArgs, _list),
)
