"""Custom tools: an embedding program's own async functions, offered to the model.

``@tool`` turns ``async def f(ctx: SessionContext, city: str, days: int = 1) -> str``
into a :class:`~halo_actors.tools.base.Tool`: the name is the function's, the
description its docstring, and the JSON schema the model sees is derived from
the parameters after the context (``Annotated[T, msgspec.Meta(description=...)]``
documents one). A function whose one parameter after the context is a msgspec
``Struct`` gets that Struct as its arguments instead.

Invariants (see ``docs/design/tools.md``, "Custom tools"):
- the model's input is validated against the schema before the function runs; a
  mismatch is an ``is_error`` result naming the field and the expected parameters;
- the function receives the calling session's :class:`SessionContext`, never the
  runtime's internals; a command it runs through ``SessionContext.shell`` is confined
  exactly like the session's own ``shell_exec`` (its access level and sandbox);
- a custom tool runs as a task of the runtime's tool nursery, so that a hard
  interrupt can abandon it: its call is cancelled, and if it has not ended
  ``grace`` seconds later the turn goes on without it (its result is the cut
  marker, whatever it returns later is dropped with a warning). The runtime's own
  exit still waits for such a task: trio cannot kill one.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

import msgspec

from ..core.errors import HaloError
from .base import Tool, ToolContext, ToolOutput, schema_of
from .builtin import run_session_shell

AccessLevel = Literal["readonly", "workspace", "full"]

DEFAULT_GRACE = 2.0
"""Seconds a cancelled custom tool gets to end before the turn goes on without it."""

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What every provider accepts as a tool name."""


@dataclass(frozen=True)
class SessionContext:
    """What a custom tool learns about the session whose model called it."""

    session_id: str
    agent_id: str
    workspace: Path
    """The runtime's workspace directory (absolute)."""
    access: AccessLevel = "full"
    """The session's access level (``docs/security.md``): recorded at its creation,
    inherited by its sub-sessions, lowered by a sandboxing profile; an embedder's own
    sessions are ``full``. A tool that touches the machine must honour it (fail
    closed): :meth:`shell` does."""
    sandboxed: bool = False
    """True when this session's commands run in the sandbox (``workspace`` level)."""
    _tool: ToolContext | None = field(default=None, repr=False, compare=False)

    async def shell(self, command: str, *, time_limit: float | None = None) -> ToolOutput:
        """Run ``command`` the way this session's ``shell_exec`` would: in the sandbox
        for a ``workspace`` session, refused for a ``readonly`` one (``PathNotAccessible``)
        or where no sandbox is available (``SandboxUnavailable``), killed with its whole
        process group when the turn is cut. The output is capped like ``shell_exec``'s."""
        if self._tool is None:
            raise ToolError("this context has no session to run commands for")
        return await run_session_shell(self._tool, command, time_limit)


class ToolError(HaloError):
    """Raised by a custom tool: its message becomes an ``is_error`` result for the model."""


def session_context(ctx: ToolContext) -> SessionContext:
    """The public view of a call's context (the one place it is built)."""
    return SessionContext(
        session_id=ctx.session_id,
        agent_id=ctx.agent_id,
        workspace=Path(ctx.workspace.root),
        access=ctx.access,
        sandboxed=ctx.access == "workspace",
        _tool=ctx,
    )


ToolFunction = Callable[..., Awaitable[object]]


@overload
def tool(fn: ToolFunction, /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, grace: float = DEFAULT_GRACE
) -> Callable[[ToolFunction], Tool]: ...
def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    grace: float = DEFAULT_GRACE,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a tool of an async function: ``@tool`` or ``@tool(name=..., description=...)``.

    Its first parameter, if annotated :class:`SessionContext`, receives the calling
    session's context. What it returns becomes the result: a ``str`` as is, anything
    else as JSON; raising :class:`ToolError` gives the model an error result.
    """

    def wrap(function: ToolFunction) -> Tool:
        return _make_tool(function, name, description, grace)

    return wrap(fn) if fn is not None else wrap


def _make_tool(fn: ToolFunction, name: str | None, description: str | None, grace: float) -> Tool:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"a tool must be an async function; {fn!r} is not")
    tool_name = name or fn.__name__
    if not TOOL_NAME.fullmatch(tool_name):
        raise ValueError(f"tool name {tool_name!r} must match [A-Za-z0-9_-]{{1,64}}")
    if not grace >= 0:
        raise ValueError("grace must be >= 0 seconds")
    text = description if description is not None else inspect.getdoc(fn) or ""
    wants_context, args, as_struct = _arguments(fn, tool_name)
    expects = _expected(args)

    async def invoke(ctx: ToolContext, raw: Mapping[str, object]) -> ToolOutput:
        try:
            parsed = msgspec.convert(dict(raw), args)
        except msgspec.ValidationError as exc:
            return ToolOutput(
                f"invalid arguments for {tool_name}: {exc}. Expected: {expects}", is_error=True
            )
        head = (session_context(ctx),) if wants_context else ()
        if as_struct:
            result = await fn(*head, parsed)
        else:
            result = await fn(*head, **msgspec.structs.asdict(parsed))
        return _output(result)

    return Tool(tool_name, text.strip(), schema_of(args), invoke, grace=grace)


def _arguments(fn: ToolFunction, tool_name: str) -> tuple[bool, type[msgspec.Struct], bool]:
    """(takes a context?, the arguments' Struct, passed as one Struct?)."""
    hints = typing.get_type_hints(fn, include_extras=True)
    params = list(inspect.signature(fn).parameters.values())
    wants_context = bool(params) and hints.get(params[0].name) is SessionContext
    rest = params[1:] if wants_context else params
    for param in rest:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"tool {tool_name}: parameter {param.name!r} cannot be an argument")
        if param.name not in hints:
            raise TypeError(f"tool {tool_name}: parameter {param.name!r} needs a type annotation")
    if len(rest) == 1 and _is_struct(hints[rest[0].name]):
        return wants_context, hints[rest[0].name], True
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        (p.name, hints[p.name]) if p.default is p.empty else (p.name, hints[p.name], p.default)
        for p in rest
    ]
    struct = msgspec.defstruct(
        f"{tool_name}_arguments", fields, kw_only=True, forbid_unknown_fields=True
    )
    return wants_context, struct, False


def _is_struct(hint: object) -> bool:
    return isinstance(hint, type) and issubclass(hint, msgspec.Struct)


def _expected(args: type[msgspec.Struct]) -> str:
    """The parameters in a line the model can act on: ``city (string, required), days``."""
    schema = schema_of(args)
    props = schema.get("properties")
    required = schema.get("required")
    if not isinstance(props, dict) or not props:
        return "no arguments"
    needed = set(required) if isinstance(required, list) else set()
    parts = []
    for key, spec in props.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        bits = [str(kind)] if isinstance(kind, str) else []
        if key in needed:
            bits.append("required")
        parts.append(f"{key} ({', '.join(bits)})" if bits else key)
    return ", ".join(parts)


def _output(result: object) -> ToolOutput:
    if isinstance(result, ToolOutput):
        return result
    if isinstance(result, str):
        return ToolOutput(result)
    return ToolOutput(msgspec.json.encode(result).decode())
