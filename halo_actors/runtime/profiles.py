"""Agent profiles: which script or model, tools, team and limits an agent has.

Profiles load from ``<workspace>/.halo/agents/<name>.toml`` (see
``docs/design/profiles.md``); the built-in ``default`` exists unless a file
overrides it. A broken file raises ``ProfileError`` naming the file and field; when a
whole workspace loads, a broken file breaks only its own profile (:meth:`Profiles.problem`
says why), so the other profiles' sessions go on working.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from ..agent.providers.options import ModelConfigError, ModelOptions, check_options, parse_spec
from ..core.errors import ProfileError
from ..core.ids import is_safe_segment
from ..core.logger import get_logger
from ..tools.registry import BUILTINS, ToolRegistry
from ..tools.sandbox import DEFAULT_MAX_PROCESSES

log = get_logger("halo_actors.profiles")

DEFAULT_TOOLS = (
    "shell_exec",
    "file_read",
    "file_write",
    "file_edit",
    "file_list",
    "glob",
    "grep",
    "start_session",
    "query_session",
    "interrupt_session",
    "stop_session",
    "archive_session",
    "get_session_output",
    "list_sessions",
)


# Bounds are checked when a profile file is loaded (msgspec checks ``Meta`` on convert).
Positive = Annotated[int, msgspec.Meta(gt=0)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]


class Limits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    report_cap: NonNegative = 4_000
    """Characters of a child's output forwarded in a report."""
    max_tokens: Positive = 200_000
    """Context size of the model."""
    compress_at: Positive = 150_000
    """Estimated tokens at which the conversation is compacted."""
    max_steps: Positive = 50
    """Model calls one turn may make."""
    max_parallel_tools: Positive = 8
    shell_timeout: PositiveSeconds | None = None
    shell_output_cap: NonNegative = 64_000
    kill_grace: Seconds = 2.0
    max_processes: Positive = DEFAULT_MAX_PROCESSES
    """Processes a sandboxed command may have at once (a fork bomb stops there)."""
    compaction_grace: Seconds = 30.0
    """Seconds a compaction under way may still take once its turn is cut (a stop, a
    hard interrupt); past them it is abandoned (``docs/design/turns.md``)."""


class AgentProfile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    description: str = ""
    system: str = "You are a helpful agent running inside halo_actors."
    model: str = ""
    """``""``: the runtime's model; ``scripted``: a ScriptedModel; or a provider spec
    such as ``anthropic:claude-sonnet-4-5`` (see ``docs/models.md``)."""
    max_tokens: Positive | None = None
    """Output tokens one model response may have (the context window is ``limits.max_tokens``)."""
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    thinking_budget: Positive | None = None
    """Tokens of extended thinking per response (models that think)."""
    tools: tuple[str, ...] = DEFAULT_TOOLS
    team: tuple[str, ...] = ("default",)
    """Agent profiles this agent may start as sub-sessions."""
    limits: Limits = Limits()
    sandbox: Literal["none", "workspace"] = "none"
    """``workspace``: this agent's commands run sandboxed even in a ``full`` session.
    A profile can only lower a session's access level (``docs/security.md``)."""
    network: bool = False
    """Sandboxed commands may use the network (off: only their own loopback)."""

    def model_options(self) -> ModelOptions:
        """What this profile asks of each model response."""
        return ModelOptions(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            thinking_budget=self.thinking_budget,
        )


DEFAULT_PROFILE = AgentProfile(name="default", description="The built-in demo agent.")


class Profiles:
    """The profiles one runtime knows, by name."""

    def __init__(self, profiles: dict[str, AgentProfile] | None = None) -> None:
        self._by_name = {"default": DEFAULT_PROFILE, **(profiles or {})}
        self._broken: dict[str, ProfileError] = {}
        """Profiles whose file is broken, and why; never in ``_by_name`` at once."""

    def get(self, name: str) -> AgentProfile | None:
        """The profile, or None when unknown or broken (see :meth:`problem`)."""
        return self._by_name.get(name)

    def problem(self, name: str) -> ProfileError | None:
        """Why the profile ``name`` is unusable, if its file is broken."""
        return self._broken.get(name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def add(self, profile: AgentProfile) -> None:
        self._by_name[profile.name] = profile
        self._broken.pop(profile.name, None)

    def mark_broken(self, name: str, error: ProfileError) -> None:
        """``name`` has a broken file: it is unusable (also a built-in it would override)."""
        self._by_name.pop(name, None)
        self._broken[name] = error

    def check_tools(self, tools: ToolRegistry) -> None:
        """Every profile names only tools of ``tools``; else ``ProfileError`` naming it."""
        for profile in self._by_name.values():
            unknown = tools.unknown(profile.tools)
            if unknown is not None:
                raise ProfileError(
                    f"agent profile {profile.name!r}: {tools.describe_unknown(unknown)}"
                )

    @classmethod
    def load(cls, workspace: Path, tools: ToolRegistry = BUILTINS) -> Profiles:
        """Built-ins plus every ``.halo/agents/*.toml`` of the workspace; their ``tools``
        may name the built-ins and the custom tools of ``tools``. A broken file marks its
        profile broken (and is logged) instead of failing the whole load."""
        profiles = cls()
        folder = workspace / ".halo" / "agents"
        for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
            try:
                profiles.add(load_profile(path, tools))
            except ProfileError as exc:
                log.warning("profile_broken", file=path.name, error=str(exc))
                profiles.mark_broken(path.stem, exc)
        return profiles


def load_profile(path: Path, tools: ToolRegistry = BUILTINS) -> AgentProfile:
    name = path.stem
    if not is_safe_segment(name):
        raise ProfileError(f"{path.name}: the file name is not a safe agent name")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path.name}: cannot read the profile: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        near = _key_near(text, str(exc))
        where = f" near `{near}`" if near else ""
        raise ProfileError(f"{path.name}: broken TOML{where}: {exc}") from None
    data.setdefault("name", name)
    try:
        profile = msgspec.convert(data, AgentProfile)
    except msgspec.ValidationError as exc:
        raise ProfileError(f"{path.name}: {exc}") from None
    if profile.name != name:
        raise ProfileError(f"{path.name}: `name` must match the file name ({name!r})")
    problem = model_problem(profile)
    if problem:
        raise ProfileError(f"{path.name}: {problem}")
    unknown = tools.unknown(profile.tools)
    if unknown is not None:
        raise ProfileError(f"{path.name}: `tools` names {tools.describe_unknown(unknown)}")
    return profile


def model_problem(profile: AgentProfile) -> str | None:
    """What is wrong with the profile's model settings and context limits, or None."""
    try:
        spec = parse_spec(profile.model) if profile.model else None
    except ModelConfigError as exc:
        return f"`model`: {exc}"
    limits = profile.limits
    if limits.compress_at >= limits.max_tokens:
        return (
            f"`limits.compress_at` ({limits.compress_at}) must be below the context window "
            f"`limits.max_tokens` ({limits.max_tokens})"
        )
    problems = check_options(spec, profile.model_options(), limits.max_tokens)
    return "; ".join(problems) if problems else None


_KEY = re.compile(r"\s*([A-Za-z0-9_-]+)\s*=")
_TABLE = re.compile(r"\s*\[+\s*([A-Za-z0-9_.-]+)\s*\]+")


def _key_near(text: str, error: str) -> str | None:
    """The dotted key on or above the line a TOML error names (the last one at end of file)."""
    at = re.search(r"at line (\d+)", error)
    lines = text.splitlines()[: int(at[1]) if at else None]
    key = None
    for line in reversed(lines):
        if key is None and (found := _KEY.match(line)):
            key = found[1]
        elif key is not None and (table := _TABLE.match(line)):
            return f"{table[1]}.{key}"
    return key
