"""The tool protocol, the context a call runs in, and the one place calls are executed.

A :class:`Tool` couples a name and description with a msgspec ``Struct`` of
arguments (its JSON schema is what the model sees) and an async ``run``.
:func:`call_tool` validates the model's input, runs the tool and turns every
expected failure into an ``is_error`` result the model can read; only
cancellation and real bugs propagate. See ``docs/design/tools.md``.

The session tools reach the runtime only through :class:`TreeControl` and
:class:`TurnControl` (protocols), so this layer never imports the runtime.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, Protocol, TypeVar

import msgspec
import trio

from ..core.access import Access
from ..core.errors import HaloError
from ..core.logger import get_logger
from .abandon import run_abandonable
from .files import Workspace
from .sandbox import ShellConfinement
from .shell import ShellLimits

log = get_logger(__name__)

Delivery = Literal["started", "queued"]


class TreeControl(Protocol):
    """What session tools may ask of the supervisor (already-gated calls only)."""

    def exists(self, session_id: str) -> bool: ...
    def is_live(self, session_id: str) -> bool: ...
    def team_of(self, agent_id: str) -> tuple[str, ...]: ...
    async def start_child(
        self, parent_id: str, agent_id: str, task: str, label: str, *, wait: bool
    ) -> str:
        """Create and start a sub-session; ``wait``: return once it is durable."""
        ...

    async def send(
        self, target: str, text: str, *, source: str | None, mode: Literal["soft", "hard"]
    ) -> Delivery: ...
    async def stop(self, target: str) -> bool: ...
    async def archive(self, target: str) -> bool: ...
    def output(self, target: str) -> str: ...
    def describe_tree(self, root: str) -> list[dict[str, object]]: ...


class TurnControl(Protocol):
    """The running turn, as the built-in ``continue_task`` and ``shell_exec`` see it."""

    async def arm_kick(self) -> str: ...
    async def track_process_group(self, pgid: int) -> None:
        """Remember a command's group (an abort kills it) and log it (so does recovery
        after a crash); called as the command starts."""
        ...

    def untrack_process_group(self, pgid: int) -> None: ...


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What the model is told about a tool."""

    name: str
    description: str
    input_schema: dict[str, object]


class ToolContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool call knows of its session (made per turn: a Struct, built in C)."""

    session_id: str
    agent_id: str
    workspace: Workspace
    tree: TreeControl
    turn: TurnControl
    shell: ShellLimits = msgspec.field(default_factory=ShellLimits)
    access: Access = "full"
    """The session's access level (``core/access.py``): what its tools may do (and what
    custom tools are told)."""
    confinement: ShellConfinement | None = None
    """The sandbox a ``workspace``-level session's commands run in; None: none
    configured, so such a session's commands are refused (fail closed)."""
    tasks: trio.Nursery | None = None
    """Where custom tools run, so a hard interrupt can abandon one that ignores its
    cancellation (``custom.run_abandonable``); None: they run inline."""


@dataclass(frozen=True)
class ToolOutput:
    text: str
    is_error: bool = False


A = TypeVar("A", bound=msgspec.Struct)
Invoke = Callable[[ToolContext, Mapping[str, object]], Awaitable[ToolOutput]]


@dataclass(frozen=True)
class Tool:
    """A tool as the runtime holds it; build one with :func:`define_tool`."""

    name: str
    description: str
    input_schema: dict[str, object]
    invoke: Invoke
    grace: float | None = None
    """Custom tools: seconds a cancelled call gets before the turn goes on without it.
    None (the built-ins): the call is awaited to its end, which they keep bounded."""
    spec: ToolSpec = field(init=False, compare=False)
    """What a model is told about this tool; built once (a model call reuses it)."""

    def __post_init__(self) -> None:
        spec = ToolSpec(
            name=self.name, description=self.description, input_schema=self.input_schema
        )
        object.__setattr__(self, "spec", spec)


def define_tool(
    name: str,
    description: str,
    args: type[A],
    run: Callable[[ToolContext, A], Awaitable[ToolOutput]],
) -> Tool:
    """A tool whose raw input is validated into ``args`` before ``run`` sees it."""

    async def invoke(ctx: ToolContext, raw: Mapping[str, object]) -> ToolOutput:
        try:
            parsed = msgspec.convert(dict(raw), args)
        except msgspec.ValidationError as exc:
            return ToolOutput(f"invalid arguments for {name}: {exc}", is_error=True)
        return await run(ctx, parsed)

    return Tool(name, description, schema_of(args), invoke)


def schema_of(args: type[msgspec.Struct]) -> dict[str, object]:
    """The JSON schema of ``args`` as one object schema (its ``$defs`` kept if nested)."""
    schema = msgspec.json.schema(args)
    defs = schema.get("$defs", {})
    ref = str(schema.get("$ref", "")).rsplit("/", 1)[-1]
    if isinstance(defs, dict) and ref in defs:
        body = dict(defs[ref])
        if len(defs) > 1:
            body["$defs"] = defs
        return body
    return schema


async def call_tool(
    tools: Mapping[str, Tool], ctx: ToolContext, name: str, raw: Mapping[str, object]
) -> ToolOutput:
    """Run one tool call; expected failures become ``is_error`` results."""
    tool = tools.get(name)
    if tool is None:
        return ToolOutput(f"unknown tool {name!r}; available: {', '.join(sorted(tools))}", True)
    if tool.grace is not None and ctx.tasks is not None:
        call = partial(_invoke, tool, ctx, raw)
        closing = ToolOutput(f"{name}: cancelled (the runtime is closing)", is_error=True)
        return await run_abandonable(ctx.tasks, tool.grace, call, name, closing)
    return await _invoke(tool, ctx, raw)


async def _invoke(tool: Tool, ctx: ToolContext, raw: Mapping[str, object]) -> ToolOutput:
    try:
        return await tool.invoke(ctx, raw)
    except HaloError as exc:
        return ToolOutput(str(exc), is_error=True)
    except Exception as exc:  # a tool bug must not end the turn; it is logged in full
        log.exception("tool_failed", session_id=ctx.session_id, tool=tool.name)
        return ToolOutput(f"{tool.name} failed: {type(exc).__name__}: {exc}", is_error=True)
