"""Agent profiles: which script or model, tools, team and limits an agent has.

Profiles load from ``<workspace>/.halo/agents/<name>.toml`` (see
``docs/design/profiles.md``); the built-in ``default`` exists unless a file
overrides it. A broken file raises ``ProfileError`` naming the file and field.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import msgspec

from ..core.errors import ProfileError
from ..core.ids import is_safe_segment

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


class Limits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    report_cap: int = 4_000
    """Characters of a child's output forwarded in a report."""
    max_tokens: int = 200_000
    """Context size of the model."""
    compress_at: int = 150_000
    """Estimated tokens at which the conversation is compacted."""
    max_steps: int = 50
    """Model calls one turn may make."""
    max_parallel_tools: int = 8
    shell_timeout: float | None = None
    shell_output_cap: int = 64_000
    kill_grace: float = 2.0


class AgentProfile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    description: str = ""
    system: str = "You are a helpful agent running inside halo_actors."
    model: str = "scripted"
    """``scripted``: the runtime's ScriptedModel plays this agent's script."""
    tools: tuple[str, ...] = DEFAULT_TOOLS
    team: tuple[str, ...] = ("default",)
    """Agent profiles this agent may start as sub-sessions."""
    limits: Limits = Limits()


DEFAULT_PROFILE = AgentProfile(name="default", description="The built-in demo agent.")


class Profiles:
    """The profiles one runtime knows, by name."""

    def __init__(self, profiles: dict[str, AgentProfile] | None = None) -> None:
        self._by_name = {"default": DEFAULT_PROFILE, **(profiles or {})}

    def get(self, name: str) -> AgentProfile | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def add(self, profile: AgentProfile) -> None:
        self._by_name[profile.name] = profile

    @classmethod
    def load(cls, workspace: Path) -> Profiles:
        """Built-ins plus every ``.halo/agents/*.toml`` of the workspace."""
        profiles = cls()
        folder = workspace / ".halo" / "agents"
        for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
            profiles.add(load_profile(path))
        return profiles


def load_profile(path: Path) -> AgentProfile:
    name = path.stem
    if not is_safe_segment(name):
        raise ProfileError(f"{path.name}: the file name is not a safe agent name")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"{path.name}: cannot read the profile: {exc}") from None
    data.setdefault("name", name)
    try:
        profile = msgspec.convert(data, AgentProfile)
    except msgspec.ValidationError as exc:
        raise ProfileError(f"{path.name}: {exc}") from None
    if profile.name != name:
        raise ProfileError(f"{path.name}: `name` must match the file name ({name!r})")
    return profile
