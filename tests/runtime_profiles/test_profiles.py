"""Agent profiles: the built-in ``default`` and ``<workspace>/.halo/agents/<name>.toml``.

A broken profile file must be reported with the file and the field at fault
(``docs/design/profiles.md``), and ``open_runtime`` must load the workspace's
profiles. Real files in ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from halo_actors.core.errors import InvalidInput, ProfileError
from halo_actors.runtime.embed import open_runtime
from halo_actors.runtime.profiles import (
    DEFAULT_PROFILE,
    DEFAULT_TOOLS,
    AgentProfile,
    Limits,
    Profiles,
    load_profile,
)

BUDGET = 5.0

RESEARCHER = """\
description = "Reads and summarises."
system = "You research."
tools = ["file_read", "grep", "start_session"]
team = ["helper"]

[limits]
report_cap = 1000
max_tokens = 50000
compress_at = 40000
max_steps = 12
max_parallel_tools = 2
shell_timeout = 30.5
shell_output_cap = 2048
kill_grace = 0.5
"""


def write_agent(workspace: Path, file_name: str, text: str | bytes) -> Path:
    folder = workspace / ".halo" / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# --- built-ins -------------------------------------------------------------------------


def test_builtin_default_profile_exists_with_every_default() -> None:
    profiles = Profiles()
    assert profiles.names() == ["default"]
    default = profiles.get("default")
    assert default is DEFAULT_PROFILE
    assert default.tools == DEFAULT_TOOLS
    assert default.team == ("default",)
    assert default.model == ""  # the runtime's own model
    assert default.limits == Limits()
    assert profiles.get("nobody") is None


@pytest.mark.parametrize("layout", ["nothing", "halo_only", "empty_agents"])
def test_workspace_without_profile_files_gives_just_the_builtins(
    tmp_path: Path, layout: str
) -> None:
    if layout != "nothing":
        (tmp_path / ".halo").mkdir()
    if layout == "empty_agents":
        (tmp_path / ".halo" / "agents").mkdir()
    assert Profiles.load(tmp_path).names() == ["default"]


# --- loading files ------------------------------------------------------------------------


def test_profile_file_loads_tools_team_and_limits(tmp_path: Path) -> None:
    write_agent(tmp_path, "researcher.toml", RESEARCHER)
    profiles = Profiles.load(tmp_path)
    assert profiles.names() == ["default", "researcher"]
    assert profiles.get("researcher") == AgentProfile(
        name="researcher",
        description="Reads and summarises.",
        system="You research.",
        tools=("file_read", "grep", "start_session"),
        team=("helper",),
        limits=Limits(
            report_cap=1000,
            max_tokens=50_000,
            compress_at=40_000,
            max_steps=12,
            max_parallel_tools=2,
            shell_timeout=30.5,
            shell_output_cap=2048,
            kill_grace=0.5,
        ),
    )


def test_fields_left_out_take_their_defaults(tmp_path: Path) -> None:
    write_agent(tmp_path, "plain.toml", "[limits]\nmax_steps = 3\n")
    plain = Profiles.load(tmp_path).get("plain")
    assert plain == AgentProfile(name="plain", limits=Limits(max_steps=3))


def test_a_file_named_default_overrides_the_builtin(tmp_path: Path) -> None:
    write_agent(tmp_path, "default.toml", 'tools = ["file_read"]\nteam = []\n')
    default = Profiles.load(tmp_path).get("default")
    assert default is not None
    assert (default.tools, default.team) == (("file_read",), ())


def test_only_toml_files_are_profiles(tmp_path: Path) -> None:
    write_agent(tmp_path, "README.md", "not a profile = [")
    write_agent(tmp_path, "notes.toml.bak", "broken = [")
    assert Profiles.load(tmp_path).names() == ["default"]


# --- broken files: the file and the field are named -------------------------------------


@pytest.mark.parametrize(
    (
        "file_name",
        "text",
        "message",
    ),  # a message ending in ": " is a prefix (tomllib's words follow)
    [
        (
            "writer.toml",
            'system = "never closed\nteam = []\n',
            "writer.toml: broken TOML near `system`: ",
        ),
        (
            "writer.toml",
            "[limits]\nreport_cap = 4_000_\n",
            "writer.toml: broken TOML near `limits.report_cap`: ",
        ),
        ("writer.toml", "colour = 'blue'\n", "writer.toml: Object contains unknown field `colour`"),
        (
            "writer.toml",
            "[limits]\nreport_size = 10\n",
            "writer.toml: Object contains unknown field `report_size` - at `$.limits`",
        ),
        (
            "writer.toml",
            'team = "helper"\n',
            "writer.toml: Expected `array`, got `str` - at `$.team`",
        ),
        (
            "writer.toml",
            '[limits]\nmax_steps = "many"\n',
            "writer.toml: Expected `int`, got `str` - at `$.limits.max_steps`",
        ),
        (
            "writer.toml",
            "[limits]\nkill_grace = -1.0\n",
            "writer.toml: Expected `float` >= 0.0 - at `$.limits.kill_grace`",
        ),
        (
            "writer.toml",
            "[limits]\nmax_parallel_tools = 0\n",
            "writer.toml: Expected `int` >= 1 - at `$.limits.max_parallel_tools`",
        ),
        (
            "writer.toml",
            'name = "editor"\n',
            "writer.toml: `name` must match the file name ('writer')",
        ),
    ],
)
def test_broken_profile_names_the_file_and_the_field(
    tmp_path: Path, file_name: str, text: str, message: str
) -> None:
    path = write_agent(tmp_path, file_name, text)
    with pytest.raises(ProfileError) as direct:
        load_profile(path)
    profiles = Profiles.load(tmp_path)  # a broken file breaks only its own profile
    name = Path(file_name).stem
    assert profiles.get(name) is None
    assert str(profiles.problem(name)) == str(direct.value)
    if message.endswith(": "):
        assert str(direct.value).startswith(message)
        assert "(at line " in str(direct.value)
    else:
        assert str(direct.value) == message


def test_unknown_tool_is_refused_when_the_file_loads(tmp_path: Path) -> None:
    write_agent(tmp_path, "writer.toml", 'tools = ["file_read", "teleport"]\n')
    problem = Profiles.load(tmp_path).problem("writer")
    assert problem is not None
    assert str(problem).startswith("writer.toml: `tools` names unknown tool 'teleport'")


def test_unreadable_profile_names_the_file(tmp_path: Path) -> None:
    write_agent(tmp_path, "latin.toml", "system = 'caf\xe9'\n".encode("latin-1"))
    assert str(Profiles.load(tmp_path).problem("latin")).startswith(
        "latin.toml: cannot read the profile: "
    )


def test_unsafe_file_name_is_refused(tmp_path: Path) -> None:
    write_agent(tmp_path, "my agent.toml", "")
    with pytest.raises(ProfileError) as info:
        load_profile(tmp_path / ".halo" / "agents" / "my agent.toml")
    assert str(info.value) == "my agent.toml: the file name is not a safe agent name"
    assert Profiles.load(tmp_path).names() == ["default"]


# --- open_runtime ----------------------------------------------------------------------------


async def test_open_runtime_loads_the_workspace_profiles(tmp_path: Path) -> None:
    write_agent(tmp_path, "researcher.toml", RESEARCHER)
    with trio.fail_after(BUDGET):
        async with open_runtime(tmp_path, durable=False) as sup:
            assert sup.profiles.names() == ["default", "researcher"]
            assert sup.team_of("researcher") == ("helper",)
            session = await sup.create_session(namespace="cli", agent_id="researcher")
            assert sup.state(session).agent_id == "researcher"


async def test_a_broken_profile_fails_only_sessions_of_that_profile(tmp_path: Path) -> None:
    """One broken profile file fails only sessions of that profile, with a clear error."""
    write_agent(tmp_path, "writer.toml", "colour = 'blue'\n")
    write_agent(tmp_path, "researcher.toml", RESEARCHER)
    with trio.fail_after(BUDGET):
        async with open_runtime(tmp_path, durable=False) as sup:
            assert sup.profiles.names() == ["default", "researcher"]
            await sup.create_session(namespace="cli", agent_id="researcher")
            with pytest.raises(
                ProfileError, match=r"^agent profile 'writer' is broken: writer\.toml: "
            ):
                await sup.create_session(namespace="cli", agent_id="writer")


async def test_open_runtime_uses_given_profiles_instead_of_the_files(tmp_path: Path) -> None:
    write_agent(tmp_path, "writer.toml", "colour = 'blue'\n")
    given = Profiles({"solo": AgentProfile(name="solo", team=())})
    with trio.fail_after(BUDGET):
        async with open_runtime(tmp_path, durable=False, profiles=given) as sup:
            assert sup.profiles is given


async def test_open_runtime_creates_a_missing_workspace_and_refuses_a_file(tmp_path: Path) -> None:
    fresh = tmp_path / "a" / "b"
    with trio.fail_after(BUDGET):
        async with open_runtime(fresh) as sup:
            await sup.create_session(namespace="cli")
        assert (fresh / ".halo" / "events.db").is_file()
        (tmp_path / "plain").write_text("not a directory")
        with pytest.raises(InvalidInput, match="workspace root is not a directory"):
            async with open_runtime(tmp_path / "plain"):
                pytest.fail("the runtime opened")  # pragma: no cover
    assert (tmp_path / "plain").read_text() == "not a directory"
