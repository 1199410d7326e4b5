"""The workspace tools as a model calls them: through ``call_tool`` with raw JSON input.

``files.py`` and ``shell.py`` have their own tests; these check the tool layer on
top: argument validation, the text the model reads back, errors as ``is_error``
results (never an exception), the JSON schemas, and the tool sets of profiles.
Real files, real symlinks, real processes and the real clock; the runtime is
replaced by two small fakes (the seams ``TreeControl`` and ``TurnControl``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
import trio
from proc_table import live_group_members

from halo_actors.core.errors import InvalidInput
from halo_actors.tools.base import Delivery, ToolContext, ToolOutput, call_tool
from halo_actors.tools.files import Workspace
from halo_actors.tools.registry import BUILTIN_TOOLS, tools_for
from halo_actors.tools.shell import ShellLimits

BUDGET = 5.0  # real seconds any test may take before it is failed


# --- fakes of the runtime seams ---------------------------------------------------


class NoTree:
    """A tree the workspace tools must never touch."""

    def exists(self, session_id: str) -> bool:
        raise AssertionError("workspace tools do not use the tree")

    def is_live(self, session_id: str) -> bool:
        raise AssertionError("workspace tools do not use the tree")

    def team_of(self, agent_id: str) -> tuple[str, ...]:
        raise AssertionError("workspace tools do not use the tree")

    async def start_child(
        self, parent_id: str, agent_id: str, task: str, label: str, *, wait: bool
    ) -> str:
        raise AssertionError("workspace tools do not use the tree")

    async def send(
        self, target: str, text: str, *, source: str | None, mode: Literal["soft", "hard"]
    ) -> Delivery:
        raise AssertionError("workspace tools do not use the tree")

    async def stop(self, target: str) -> bool:
        raise AssertionError("workspace tools do not use the tree")

    async def archive(self, target: str) -> bool:
        raise AssertionError("workspace tools do not use the tree")

    def output(self, target: str) -> str:
        raise AssertionError("workspace tools do not use the tree")

    def describe_tree(self, root: str) -> list[dict[str, object]]:
        raise AssertionError("workspace tools do not use the tree")


class RecordingTurn:
    """Records the process groups ``shell_exec`` tracks; no turn is open."""

    def __init__(self) -> None:
        self.tracked: list[int] = []
        self.untracked: list[int] = []

    async def arm_kick(self) -> str:
        return "no_turn"

    async def track_process_group(self, pgid: int) -> None:
        self.tracked.append(pgid)

    def untrack_process_group(self, pgid: int) -> None:
        self.untracked.append(pgid)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("do not read\n")
    return folder


@pytest.fixture
def turn(ws: Workspace) -> Iterator[RecordingTurn]:
    """The fake turn; afterwards no process group it saw may still have a live member."""
    recording = RecordingTurn()
    yield recording
    left = [pgid for pgid in recording.tracked if live_group_members(pgid)]
    for pgid in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    assert not left, f"process groups left running: {left}"


def context(ws: Workspace, turn: RecordingTurn, **shell: float) -> ToolContext:
    return ToolContext(
        session_id="cli_1_abc",
        agent_id="default",
        workspace=ws,
        tree=NoTree(),
        turn=turn,
        shell=ShellLimits(kill_grace=0.3, **shell),  # type: ignore[arg-type]
    )


async def run(ctx: ToolContext, tool: str, **args: object) -> ToolOutput:
    with trio.fail_after(BUDGET):
        return await call_tool(BUILTIN_TOOLS, ctx, tool, args)


# --- shell_exec ------------------------------------------------------------------------


async def test_shell_exec_returns_output_and_exit_code(ws: Workspace, turn: RecordingTurn) -> None:
    out = await run(context(ws, turn), "shell_exec", command="pwd; echo err >&2; exit 3")
    assert out == ToolOutput(f"{ws.root}\nerr\n[exit code 3]")


async def test_shell_exec_tracks_its_process_group_only_while_it_runs(
    ws: Workspace, turn: RecordingTurn
) -> None:
    out = await run(context(ws, turn), "shell_exec", command="echo $$")
    [pgid] = turn.tracked
    assert out.text == f"{pgid}\n[exit code 0]"
    assert turn.untracked == [pgid]


async def test_shell_exec_timeout_argument_kills_the_whole_group(
    ws: Workspace, turn: RecordingTurn
) -> None:
    command = "echo begun; sleep 30 & sleep 30"
    out = await run(context(ws, turn), "shell_exec", command=command, timeout=0.3)
    assert out == ToolOutput("begun\n[timed out after 0.3s]", is_error=True)
    [pgid] = turn.tracked
    assert live_group_members(pgid) == []
    assert turn.untracked == [pgid]


async def test_shell_exec_timeout_argument_overrides_the_profile_timeout(
    ws: Workspace, turn: RecordingTurn
) -> None:
    ctx = context(ws, turn, timeout=0.2)
    out = await run(ctx, "shell_exec", command="sleep 0.4; echo late", timeout=3)
    assert out == ToolOutput("late\n[exit code 0]")


async def test_shell_exec_states_truncation(ws: Workspace, turn: RecordingTurn) -> None:
    ctx = context(ws, turn, output_cap=100)
    out = await run(ctx, "shell_exec", command="head -c 100000 /dev/zero | tr '\\0' x")
    assert out == ToolOutput("x" * 100 + "\n[output truncated at 100 bytes]\n[exit code 0]")


async def test_cancelled_shell_exec_leaves_no_process(ws: Workspace, turn: RecordingTurn) -> None:
    ctx = context(ws, turn)
    with trio.fail_after(BUDGET), trio.move_on_after(0.3) as scope:
        await call_tool(BUILTIN_TOOLS, ctx, "shell_exec", {"command": "sleep 30 && echo x"})
    assert scope.cancelled_caught
    [pgid] = turn.tracked
    assert live_group_members(pgid) == []


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"command": "  "}, "shell command is empty"),
        ({"command": "true", "timeout": 0}, "timeout must be > 0 seconds or None, got 0.0"),
        ({"command": "true", "timeout": -1}, "timeout must be > 0 seconds or None, got -1.0"),
        (
            {"command": "true", "timeout": "1"},
            "invalid arguments for shell_exec: Expected `float | null`, got `str` - at `$.timeout`",
        ),
        ({}, "invalid arguments for shell_exec: Object missing required field `command`"),
    ],
)
async def test_shell_exec_bad_input_is_a_clear_error(
    ws: Workspace, turn: RecordingTurn, args: dict[str, object], error: str
) -> None:
    out = await run(context(ws, turn), "shell_exec", **args)
    assert out == ToolOutput(error, is_error=True)
    assert turn.tracked == []


# --- file tools -------------------------------------------------------------------------


async def test_file_write_then_read(ws: Workspace, turn: RecordingTurn) -> None:
    ctx = context(ws, turn)
    written = await run(ctx, "file_write", path="notes/a.txt", content="one\ntwo\nthree\n")
    assert written == ToolOutput("wrote 14 bytes to notes/a.txt")
    assert (ws.root / "notes" / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert await run(ctx, "file_read", path="notes/a.txt") == ToolOutput("one\ntwo\nthree\n")
    window = await run(ctx, "file_read", path="notes/a.txt", offset=1, limit=1)
    assert window == ToolOutput("two\n")


async def test_file_read_of_a_missing_file_says_not_found(
    ws: Workspace, turn: RecordingTurn
) -> None:
    out = await run(context(ws, turn), "file_read", path="nope.txt")
    assert out == ToolOutput("nope.txt: not found", is_error=True)


async def test_file_read_negative_window_names_the_tool_arguments(
    ws: Workspace, turn: RecordingTurn
) -> None:
    (ws.root / "a.txt").write_text("a\n")
    out = await run(context(ws, turn), "file_read", path="a.txt", offset=-1)
    assert out == ToolOutput(
        "invalid arguments for file_read: Expected `int` >= 0 - at `$.offset`", is_error=True
    )


async def test_file_edit_replaces_a_unique_string(ws: Workspace, turn: RecordingTurn) -> None:
    (ws.root / "a.py").write_text("x = 1\ny = 2\n")
    out = await run(
        context(ws, turn), "file_edit", path="a.py", old_string="y = 2", new_string="y = 3"
    )
    assert out == ToolOutput("replaced 1 occurrence in a.py")
    assert (ws.root / "a.py").read_text() == "x = 1\ny = 3\n"


async def test_file_edit_of_a_string_that_is_not_unique_changes_nothing(
    ws: Workspace, turn: RecordingTurn
) -> None:
    ctx = context(ws, turn)
    (ws.root / "a.py").write_text("x = 1\nx = 1\n")
    out = await run(ctx, "file_edit", path="a.py", old_string="x = 1", new_string="x = 2")
    assert out == ToolOutput(
        "a.py: old text occurs 2 times; add surrounding context to make it unique, "
        "or set replace_all",
        is_error=True,
    )
    assert (ws.root / "a.py").read_text() == "x = 1\nx = 1\n"
    every = await run(
        ctx, "file_edit", path="a.py", old_string="x = 1", new_string="x = 2", replace_all=True
    )
    assert every == ToolOutput("replaced 2 occurrences in a.py")
    assert (ws.root / "a.py").read_text() == "x = 2\nx = 2\n"


async def test_file_edit_of_a_missing_string_says_so(ws: Workspace, turn: RecordingTurn) -> None:
    (ws.root / "a.py").write_text("x = 1\n")
    out = await run(context(ws, turn), "file_edit", path="a.py", old_string="z", new_string="w")
    assert out == ToolOutput("a.py: old text not found", is_error=True)


async def test_file_list_hides_runtime_state(ws: Workspace, turn: RecordingTurn) -> None:
    ctx = context(ws, turn)
    (ws.root / ".halo").mkdir()
    (ws.root / ".halo" / "events.db").write_bytes(b"SQLite")
    (ws.root / "src").mkdir()
    (ws.root / "README.md").write_text("hi\n")
    assert await run(ctx, "file_list") == ToolOutput("README.md\nsrc/")
    assert await run(ctx, "file_list", path="src") == ToolOutput("(empty directory)")
    hidden = await run(ctx, "file_list", path=".halo")
    assert hidden == ToolOutput("path is not accessible", is_error=True)
    read = await run(ctx, "file_read", path=".halo/events.db")
    assert read == ToolOutput("path is not accessible", is_error=True)


async def test_glob_finds_files_at_any_depth_but_never_runtime_state(
    ws: Workspace, turn: RecordingTurn
) -> None:
    ctx = context(ws, turn)
    for rel in ("a.py", "pkg/b.py", "pkg/deep/c.py", "pkg/d.txt", ".halo/e.py"):
        (ws.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / rel).write_text("pass\n")
    assert await run(ctx, "glob", pattern="**/*.py") == ToolOutput("a.py\npkg/b.py\npkg/deep/c.py")
    assert await run(ctx, "glob", pattern="*.rs") == ToolOutput("(no match)")
    refused = await run(ctx, "glob", pattern="../*")
    assert refused == ToolOutput("path is outside the workspace", is_error=True)


async def test_grep_shows_path_line_and_text(ws: Workspace, turn: RecordingTurn) -> None:
    ctx = context(ws, turn)
    (ws.root / "src").mkdir()
    (ws.root / "src" / "a.py").write_text("import os\nTODO: fix\n")
    (ws.root / "b.txt").write_text("TODO later\n")
    (ws.root / ".halo").mkdir()
    (ws.root / ".halo" / "log.txt").write_text("TODO hidden\n")
    found = await run(ctx, "grep", pattern="TODO")
    assert found == ToolOutput("b.txt:1: TODO later\nsrc/a.py:2: TODO: fix")
    only_py = await run(ctx, "grep", pattern="TODO", glob="*.py")
    assert only_py == ToolOutput("src/a.py:2: TODO: fix")
    assert await run(ctx, "grep", pattern="nothing") == ToolOutput("(no match)")
    bad = await run(ctx, "grep", pattern="(")
    assert bad.is_error and bad.text.startswith("bad regular expression: ")


async def test_symlinks_leading_outside_are_refused(
    ws: Workspace, turn: RecordingTurn, outside: Path
) -> None:
    ctx = context(ws, turn)
    (ws.root / "link.txt").symlink_to(outside / "secret.txt")
    (ws.root / "out").symlink_to(outside, target_is_directory=True)
    refused = ToolOutput("path is outside the workspace", is_error=True)
    assert await run(ctx, "file_read", path="link.txt") == refused
    assert await run(ctx, "file_read", path="out/secret.txt") == refused
    assert await run(ctx, "file_write", path="link.txt", content="x") == refused
    assert await run(ctx, "file_write", path="out/new.txt", content="x") == refused
    assert await run(ctx, "file_edit", path="link.txt", old_string="do", new_string="x") == refused
    assert await run(ctx, "grep", pattern="do", path="out") == refused
    assert await run(ctx, "file_read", path="../outside/secret.txt") == refused
    assert await run(ctx, "file_list") == ToolOutput("(empty directory)")
    assert (outside / "secret.txt").read_text() == "do not read\n"
    assert os.listdir(outside) == ["secret.txt"]


async def test_binary_file_is_a_clear_error(ws: Workspace, turn: RecordingTurn) -> None:
    ctx = context(ws, turn)
    (ws.root / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    (ws.root / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    for name in ("blob.bin", "latin1.txt"):
        out = await run(ctx, "file_read", path=name)
        assert out == ToolOutput(f"{name}: binary file, not shown", is_error=True)


async def test_errors_never_show_the_absolute_workspace_path(
    ws: Workspace, turn: RecordingTurn, outside: Path
) -> None:
    ctx = context(ws, turn)
    (ws.root / "link.txt").symlink_to(outside / "secret.txt")
    outs = [
        await run(ctx, "file_read", path="missing/x.txt"),
        await run(ctx, "file_read", path="link.txt"),
        await run(ctx, "file_list", path="missing"),
        await run(ctx, "file_edit", path="missing.txt", old_string="a", new_string="b"),
    ]
    assert all(out.is_error for out in outs)
    assert not any(str(ws.root) in out.text or str(outside) in out.text for out in outs)


# --- schemas and tool sets ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILTIN_TOOLS))
def test_every_tool_schema_is_an_object_with_properties_and_required(name: str) -> None:
    spec = BUILTIN_TOOLS[name].spec
    schema = spec.input_schema
    assert spec.name == name and spec.description
    assert schema["type"] == "object"
    assert isinstance(schema["properties"], dict)
    assert isinstance(schema["required"], list)
    assert set(schema["required"]) <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_schemas_require_exactly_the_arguments_without_defaults() -> None:
    required = {name: tool.spec.input_schema["required"] for name, tool in BUILTIN_TOOLS.items()}
    assert required == {
        "shell_exec": ["command"],
        "file_read": ["path"],
        "file_write": ["path", "content"],
        "file_edit": ["path", "old_string", "new_string"],
        "file_list": [],
        "glob": ["pattern"],
        "grep": ["pattern"],
        "start_session": ["task"],
        "query_session": ["session_id", "message"],
        "interrupt_session": ["session_id"],
        "stop_session": ["session_id"],
        "archive_session": ["session_id"],
        "get_session_output": ["session_id"],
        "list_sessions": [],
        "continue_task": [],
    }


def test_tools_for_an_unknown_name_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="unknown tool 'nonexistent'"):
        tools_for(["nonexistent"])
    with pytest.raises(InvalidInput, match="unknown tool 'nope'"):
        tools_for(["file_read", "nope"])


@pytest.mark.parametrize("names", [[], ["file_read"], ["shell_exec", "stop_session"]])
def test_continue_task_is_in_every_tool_set(names: list[str]) -> None:
    chosen = tools_for(names)
    assert list(chosen) == [*names, "continue_task"]


async def test_unknown_tool_call_is_an_error_listing_the_available_tools(
    ws: Workspace, turn: RecordingTurn
) -> None:
    ctx = context(ws, turn)
    with trio.fail_after(BUDGET):
        out = await call_tool(tools_for(["glob"]), ctx, "file_read", {"path": "a"})
    assert out == ToolOutput("unknown tool 'file_read'; available: continue_task, glob", True)
