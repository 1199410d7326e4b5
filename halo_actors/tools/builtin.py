"""The workspace tools a model calls: ``shell_exec`` and the file tools, plus ``continue_task``.

Thin wrappers: argument Structs (their JSON schema is what the model sees) over
:mod:`.shell` and :mod:`.files`. Blocking file work runs in a worker thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Annotated, TypeVar

import msgspec
import trio

from ..core.errors import PathNotAccessible
from .base import Tool, ToolContext, ToolOutput, define_tool
from .sandbox import SandboxUnavailable
from .shell import ShellLimits, kill_process_group, run_shell, wait_process_group_gone

Wrap = Callable[[list[str]], list[str]]

_NAMESPACE_TEARDOWN = 1.0  # seconds; the kernel takes milliseconds

T = TypeVar("T")


async def _in_thread(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn)


class ShellArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    command: str
    timeout: float | None = None


async def _shell(ctx: ToolContext, args: ShellArgs) -> ToolOutput:
    return await run_session_shell(ctx, args.command, args.timeout)


async def run_session_shell(ctx: ToolContext, command: str, time_limit: float | None) -> ToolOutput:
    """A command as the session's ``shell_exec`` runs it (also for custom tools): confined
    by its access level, its process groups tracked by the turn (a hard abort kills them)."""
    limits = ctx.shell
    if time_limit is not None:
        limits = ShellLimits(
            output_cap=limits.output_cap, timeout=time_limit, kill_grace=limits.kill_grace
        )
    pgids: list[int] = []

    async def spawned(pgid: int) -> None:
        pgids.append(pgid)
        await ctx.turn.track_process_group(pgid)

    try:
        async with _confined(ctx) as wrap:
            result = await run_shell(
                command, ctx.workspace.root, limits, on_spawn=spawned, wrap=wrap
            )
            if wrap is not None:
                await _namespace_gone(pgids)
    finally:
        for pgid in pgids:
            ctx.turn.untrack_process_group(pgid)
    return ToolOutput(result.render(), is_error=result.timed_out)


async def _namespace_gone(pgids: list[int]) -> None:
    """Wait (bounded) until a sandboxed command's group is gone after its leader exited.

    bubblewrap's outer process reports the command's exit a few milliseconds before the
    kernel has finished killing what was left in its PID namespace; nothing there can
    outlive it, so waiting makes "the command is over" true when the tool returns.
    """
    with trio.move_on_after(_NAMESPACE_TEARDOWN) as late:
        for pgid in pgids:
            await wait_process_group_gone(pgid)
    if late.cancelled_caught:
        for pgid in pgids:
            await kill_process_group(pgid, 0)


@asynccontextmanager
async def _confined(ctx: ToolContext) -> AsyncIterator[Wrap | None]:
    """The launcher for the session's level: none (full), the sandbox (workspace), or a
    refusal (readonly, or no sandbox configured: fail closed)."""
    match ctx.access:
        case "full":
            yield None
        case "workspace":
            if ctx.confinement is None:
                raise SandboxUnavailable(
                    "sandbox unavailable: this runtime has no sandbox configured for "
                    "workspace-level sessions; the command was not run"
                )
            policy = ctx.confinement.policy(str(ctx.workspace.root))
            async with ctx.confinement.sandbox.confine(policy) as wrap:
                yield wrap
        case "readonly":
            raise PathNotAccessible("a read-only session has no shell")


def _require_write(ctx: ToolContext) -> None:
    if ctx.access == "readonly":
        raise PathNotAccessible("a read-only session cannot change files")


NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class ReadArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: str
    offset: NonNegative = 0
    limit: NonNegative | None = None


async def _read(ctx: ToolContext, args: ReadArgs) -> ToolOutput:
    text = await _in_thread(
        partial(ctx.workspace.read_text, args.path, offset_line=args.offset, max_lines=args.limit)
    )
    return ToolOutput(text)


class WriteArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: str
    content: str


async def _write(ctx: ToolContext, args: WriteArgs) -> ToolOutput:
    _require_write(ctx)
    size = await _in_thread(partial(ctx.workspace.write_text, args.path, args.content))
    return ToolOutput(f"wrote {size} bytes to {args.path}")


class EditArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: str
    old_string: str
    new_string: str
    replace_all: bool = False


async def _edit(ctx: ToolContext, args: EditArgs) -> ToolOutput:
    _require_write(ctx)
    count = await _in_thread(
        partial(
            ctx.workspace.edit,
            args.path,
            args.old_string,
            args.new_string,
            replace_all=args.replace_all,
        )
    )
    return ToolOutput(f"replaced {count} occurrence{'s' if count != 1 else ''} in {args.path}")


class ListArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: str = "."


async def _list(ctx: ToolContext, args: ListArgs) -> ToolOutput:
    entries = await _in_thread(partial(ctx.workspace.list_dir, args.path))
    return ToolOutput("\n".join(entries) or "(empty directory)")


class GlobArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pattern: str


async def _glob(ctx: ToolContext, args: GlobArgs) -> ToolOutput:
    found = await _in_thread(partial(ctx.workspace.glob, args.pattern))
    return ToolOutput("\n".join(found) or "(no match)")


class GrepArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pattern: str
    path: str = "."
    glob: str | None = None


async def _grep(ctx: ToolContext, args: GrepArgs) -> ToolOutput:
    found = await _in_thread(partial(ctx.workspace.grep, args.pattern, args.path, glob=args.glob))
    return ToolOutput("\n".join(found) or "(no match)")


class NoArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


async def _continue_task(ctx: ToolContext, args: NoArgs) -> ToolOutput:
    answer = await ctx.turn.arm_kick()
    if answer == "ok":
        return ToolOutput("ok: the task resumes in a new turn once this one ends")
    return ToolOutput(answer)


WRITING_TOOLS = frozenset({"shell_exec", "file_write", "file_edit"})
"""Left out of a read-only session's tool list (and refusing such a session if called)."""

WORKSPACE_TOOLS: tuple[Tool, ...] = (
    define_tool(
        "shell_exec",
        "Run a shell command (sh -c) in the workspace. Killed with its whole "
        "process group when the turn is interrupted.",
        ShellArgs,
        _shell,
    ),
    define_tool(
        "file_read",
        "Read a UTF-8 text file of the workspace (optionally a window of lines).",
        ReadArgs,
        _read,
    ),
    define_tool("file_write", "Create or overwrite a workspace file.", WriteArgs, _write),
    define_tool(
        "file_edit",
        "Replace an exact string in a workspace file (unique unless replace_all).",
        EditArgs,
        _edit,
    ),
    define_tool("file_list", "List a workspace directory.", ListArgs, _list),
    define_tool(
        "glob", "Find workspace files by glob pattern (** for any depth).", GlobArgs, _glob
    ),
    define_tool("grep", "Search workspace files with a regular expression.", GrepArgs, _grep),
)

CONTINUE_TASK: Tool = define_tool(
    "continue_task",
    "After an interrupt, resume the task you were doing before it, in a new turn once this "
    "one ends. Answers not_interrupted when there was no interrupt.",
    NoArgs,
    _continue_task,
)
