"""Workspace confinement and file operations, on real files and real symlinks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from halo_actors.core.errors import FileProblem, InvalidInput, PathNotAccessible, WorkspaceError
from halo_actors.tools import files
from halo_actors.tools.files import (
    BinaryFile,
    EditNotUnique,
    EditTargetMissing,
    FileLimits,
    FileNotFound,
    FileTooLarge,
    PathIsDirectory,
    PathNotDirectory,
    Workspace,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A workspace with a file, a subdirectory and runtime state under ``.halo``."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "notes.txt").write_text("hello\nworld\n")
    (ws / "src" / "app.py").write_text("import os\nprint('hi')\n")
    (ws / ".halo").mkdir()
    (ws / ".halo" / "events.db").write_bytes(b"SQLite format 3\x00")
    (ws / ".halo" / "events.db-wal").write_bytes(b"wal")
    (ws / ".halo" / "events.db-shm").write_bytes(b"shm")
    return ws


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace, holding a secret."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("top secret\n")
    return out


@pytest.fixture
def ws(root: Path) -> Workspace:
    return Workspace(root)


def test_public_names_are_pinned() -> None:
    assert sorted(files.__all__) == sorted(
        [
            "HALO_DIR",
            "BinaryFile",
            "EditNotUnique",
            "EditTargetMissing",
            "FileLimits",
            "FileNotFound",
            "FileTooLarge",
            "PathIsDirectory",
            "PathNotDirectory",
            "Workspace",
        ]
    )
    for name in files.__all__:
        error = getattr(files, name)
        if isinstance(error, type) and issubclass(error, Exception):
            assert issubclass(error, FileProblem)


def test_root_is_realpathed_once(root: Path, tmp_path: Path) -> None:
    (tmp_path / "via").symlink_to(root)
    assert Workspace(tmp_path / "via").root == Path(os.path.realpath(root))


def test_root_that_is_not_a_directory_is_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        Workspace(tmp_path / "missing")


def test_reads_a_file_inside_the_workspace(ws: Workspace) -> None:
    assert ws.read_text("notes.txt") == "hello\nworld\n"
    assert ws.read_text("./src/../notes.txt") == "hello\nworld\n"


@pytest.mark.parametrize("path", ["/etc/passwd", "//etc/passwd"])
def test_absolute_path_is_refused(ws: Workspace, path: str) -> None:
    with pytest.raises(PathNotAccessible, match="outside the workspace"):
        ws.resolve(path)


def test_empty_path_is_refused(ws: Workspace) -> None:
    with pytest.raises(PathNotAccessible, match="empty"):
        ws.resolve("")


def test_nul_byte_in_path_is_refused(ws: Workspace) -> None:
    with pytest.raises(PathNotAccessible, match="NUL"):
        ws.read_text("notes.txt\x00.png")


@pytest.mark.parametrize("path", ["..", "../outside/secret.txt", "src/../../x", "a/b/../../../x"])
def test_dotdot_leaving_the_workspace_is_refused(ws: Workspace, path: str) -> None:
    with pytest.raises(PathNotAccessible, match="outside the workspace"):
        ws.resolve(path, must_exist=False)


def test_lexical_check_comes_before_the_filesystem(ws: Workspace, root: Path) -> None:
    # "missing/../notes.txt" is judged on its normalised form: no directory is needed
    assert ws.resolve("missing/../notes.txt") == root / "notes.txt"


def test_symlink_leading_outside_is_refused(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(PathNotAccessible, match="outside the workspace"):
        ws.read_text("leak.txt")


def test_symlinked_directory_leading_outside_is_refused(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "src" / "out").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathNotAccessible):
        ws.read_text("src/out/secret.txt")
    with pytest.raises(PathNotAccessible):
        ws.list_dir("src/out")


def test_symlink_inside_pointing_inside_is_followed(ws: Workspace, root: Path) -> None:
    (root / "alias.txt").symlink_to("notes.txt")
    (root / "code").symlink_to("src", target_is_directory=True)
    assert ws.read_text("alias.txt") == "hello\nworld\n"
    assert ws.resolve("code/app.py") == root / "src" / "app.py"


def test_dangling_symlink_is_not_found(ws: Workspace, root: Path) -> None:
    (root / "gone.txt").symlink_to("nowhere.txt")
    with pytest.raises(FileNotFound, match="not found"):
        ws.read_text("gone.txt")
    with pytest.raises(FileNotFound):
        ws.resolve_for_serving("gone.txt")


def test_dangling_symlink_leading_outside_is_refused(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "ghost.txt").symlink_to(outside / "nowhere.txt")
    with pytest.raises(PathNotAccessible):
        ws.resolve_for_serving("ghost.txt")


@pytest.mark.parametrize(
    "path",
    [
        ".halo",
        ".halo/events.db",
        ".halo/events.db-wal",
        ".halo/events.db-shm",
        ".halo/events.db-halo-journal",
        "src/../.halo/events.db",
        ".halo/missing",
    ],
)
def test_halo_state_is_refused(ws: Workspace, path: str) -> None:
    with pytest.raises(PathNotAccessible, match="path is not accessible"):
        ws.resolve(path, must_exist=False)
    with pytest.raises(PathNotAccessible, match="path is not accessible"):
        ws.resolve_for_serving(path)


def test_symlink_into_halo_state_is_refused(ws: Workspace, root: Path) -> None:
    (root / "db").symlink_to(".halo/events.db")
    (root / "state").symlink_to(".halo", target_is_directory=True)
    with pytest.raises(PathNotAccessible, match="path is not accessible"):
        ws.resolve_for_serving("db")
    with pytest.raises(PathNotAccessible, match="path is not accessible"):
        ws.read_text("state/events.db-wal")


def test_halo_reached_through_its_own_realpath_is_refused(tmp_path: Path) -> None:
    ws_dir = tmp_path / "ws"
    (ws_dir / "runtime").mkdir(parents=True)
    (ws_dir / "runtime" / "events.db").write_bytes(b"db")
    (ws_dir / ".halo").symlink_to("runtime", target_is_directory=True)
    with pytest.raises(PathNotAccessible, match="path is not accessible"):
        Workspace(ws_dir).resolve("runtime/events.db")


def test_missing_file_is_not_found_naming_the_relative_path(ws: Workspace) -> None:
    with pytest.raises(FileNotFound, match=r"^src/missing\.py: not found$"):
        ws.read_text("src/./missing.py")


def test_binary_file_with_nul_byte_is_not_shown(ws: Workspace, root: Path) -> None:
    (root / "image.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00data")
    with pytest.raises(BinaryFile, match="binary file, not shown"):
        ws.read_text("image.bin")


def test_undecodable_utf8_is_not_shown(ws: Workspace, root: Path) -> None:
    (root / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(BinaryFile, match="binary file, not shown"):
        ws.read_text("latin1.txt")


def test_undecodable_utf8_after_the_sniffed_head_is_not_shown(ws: Workspace, root: Path) -> None:
    (root / "late.txt").write_bytes(b"a" * 10_000 + b"\xff")
    with pytest.raises(BinaryFile):
        ws.read_text("late.txt")


def test_read_over_limit_is_refused_with_window_hint(root: Path) -> None:
    (root / "big.txt").write_text("x" * 99 + "\n" + "y" * 20)
    ws = Workspace(root, FileLimits(max_read_bytes=100))
    with pytest.raises(FileTooLarge, match=r"120 bytes .*offset_line and max_lines"):
        ws.read_text("big.txt")


def test_read_window_returns_requested_lines(ws: Workspace, root: Path) -> None:
    (root / "lines.txt").write_text("".join(f"line {i}\n" for i in range(10)))
    assert ws.read_text("lines.txt", offset_line=3, max_lines=2) == "line 3\nline 4\n"
    assert ws.read_text("lines.txt", offset_line=8) == "line 8\nline 9\n"
    assert ws.read_text("lines.txt", offset_line=50) == ""


def test_read_window_of_file_over_limit_is_allowed(root: Path) -> None:
    (root / "big.txt").write_text("a" * 5000 + "\nsmall\n" + "b" * 5000)
    ws = Workspace(root, FileLimits(max_read_bytes=100))
    assert ws.read_text("big.txt", offset_line=1, max_lines=1) == "small\n"


def test_read_window_over_limit_is_refused(root: Path) -> None:
    (root / "wide.txt").write_text("a" * 500 + "\n")
    ws = Workspace(root, FileLimits(max_read_bytes=100))
    with pytest.raises(FileTooLarge, match="max_lines"):
        ws.read_text("wide.txt", max_lines=1)


def test_negative_window_is_invalid_input(ws: Workspace) -> None:
    with pytest.raises(InvalidInput):
        ws.read_text("notes.txt", offset_line=-1)


def test_read_directory_is_refused(ws: Workspace) -> None:
    with pytest.raises(PathIsDirectory, match=r"^src: is a directory$"):
        ws.read_text("src")


def test_fifo_is_refused_without_blocking(ws: Workspace, root: Path) -> None:
    os.mkfifo(root / "pipe")
    for attempt in (
        lambda: ws.read_text("pipe"),
        lambda: ws.write_text("pipe", "x"),
        lambda: ws.grep("x", "pipe"),
        lambda: ws.resolve_for_serving("pipe"),
    ):
        with pytest.raises(FileProblem, match="not a regular file"):
            attempt()
    assert ws.grep("x") == []


def test_write_creates_parent_directories_and_returns_bytes(ws: Workspace, root: Path) -> None:
    assert ws.write_text("out/deep/report.md", "héllo\n") == len("héllo\n".encode())
    assert (root / "out" / "deep" / "report.md").read_text() == "héllo\n"


def test_write_replaces_existing_content(ws: Workspace, root: Path) -> None:
    ws.write_text("notes.txt", "new")
    assert (root / "notes.txt").read_text() == "new"


def test_write_over_limit_is_invalid_input(root: Path) -> None:
    ws = Workspace(root, FileLimits(max_write_bytes=10))
    with pytest.raises(InvalidInput, match="write limit"):
        ws.write_text("big.txt", "x" * 11)
    assert not (root / "big.txt").exists()


def test_write_with_lone_surrogate_is_invalid_input(ws: Workspace, root: Path) -> None:
    with pytest.raises(InvalidInput, match="Unicode"):
        ws.write_text("bad.txt", "a\ud800b")
    assert not (root / "bad.txt").exists()


def test_write_through_symlink_leading_outside_is_refused(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(PathNotAccessible):
        ws.write_text("leak.txt", "pwned")
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_write_to_dangling_symlink_leading_outside_creates_nothing(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "plant.txt").symlink_to(outside / "planted.txt")
    with pytest.raises(PathNotAccessible):
        ws.write_text("plant.txt", "pwned")
    assert not (outside / "planted.txt").exists()


def test_write_into_symlinked_directory_leading_outside_is_refused(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "out").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathNotAccessible):
        ws.write_text("out/new/file.txt", "pwned")
    assert not (outside / "new").exists()


def test_write_into_halo_is_refused(ws: Workspace, root: Path) -> None:
    with pytest.raises(PathNotAccessible, match="path is not accessible"):
        ws.write_text(".halo/events.db", "")
    with pytest.raises(PathNotAccessible):
        ws.write_text(".halo/new/x.txt", "x")
    assert (root / ".halo" / "events.db").read_bytes() == b"SQLite format 3\x00"
    assert not (root / ".halo" / "new").exists()


def test_write_over_a_directory_is_refused(ws: Workspace) -> None:
    with pytest.raises(PathIsDirectory):
        ws.write_text("src", "x")


def test_write_below_a_file_says_a_parent_is_not_a_directory(ws: Workspace) -> None:
    with pytest.raises(FileProblem, match=r"^notes\.txt/child: a parent on the path"):
        ws.write_text("notes.txt/child", "x")


def test_edit_replaces_the_unique_occurrence(ws: Workspace, root: Path) -> None:
    assert ws.edit("src/app.py", "print('hi')", "print('bye')") == 1
    assert (root / "src" / "app.py").read_text() == "import os\nprint('bye')\n"


def test_edit_keeps_line_endings(ws: Workspace, root: Path) -> None:
    (root / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
    ws.edit("dos.txt", "two", "2")
    assert (root / "dos.txt").read_bytes() == b"one\r\n2\r\n"


def test_edit_with_old_text_not_found_says_so(ws: Workspace) -> None:
    with pytest.raises(EditTargetMissing, match=r"^notes\.txt: old text not found$"):
        ws.edit("notes.txt", "goodbye", "x")


def test_edit_not_unique_says_how_many_times(ws: Workspace, root: Path) -> None:
    (root / "rep.txt").write_text("a a a")
    with pytest.raises(EditNotUnique, match="occurs 3 times"):
        ws.edit("rep.txt", "a", "b")
    assert (root / "rep.txt").read_text() == "a a a"


def test_edit_replace_all_replaces_every_occurrence(ws: Workspace, root: Path) -> None:
    (root / "rep.txt").write_text("a a a")
    assert ws.edit("rep.txt", "a", "bb", replace_all=True) == 3
    assert (root / "rep.txt").read_text() == "bb bb bb"


@pytest.mark.parametrize(("old", "new"), [("", "x"), ("hello", "hello")])
def test_edit_with_empty_or_unchanged_old_text_is_invalid_input(
    ws: Workspace, old: str, new: str
) -> None:
    with pytest.raises(InvalidInput):
        ws.edit("notes.txt", old, new)


def test_edit_result_over_write_limit_leaves_file_alone(root: Path) -> None:
    ws = Workspace(root, FileLimits(max_write_bytes=20))
    with pytest.raises(InvalidInput):
        ws.edit("notes.txt", "hello", "h" * 50)
    assert (root / "notes.txt").read_text() == "hello\nworld\n"


def test_list_dir_sorts_marks_directories_and_hides_halo(ws: Workspace) -> None:
    assert ws.list_dir() == ["notes.txt", "src/"]
    assert ws.list_dir("src") == ["app.py"]


def test_list_dir_hides_symlinks_leading_outside_or_into_halo(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "leak").symlink_to(outside, target_is_directory=True)
    (root / "state").symlink_to(".halo", target_is_directory=True)
    (root / "code").symlink_to("src", target_is_directory=True)
    (root / "gone.txt").symlink_to("nowhere.txt")
    assert ws.list_dir() == ["code/", "gone.txt", "notes.txt", "src/"]


def test_list_dir_caps_entries_with_a_note(root: Path) -> None:
    for i in range(5):
        (root / "src" / f"f{i}.py").write_text("")
    ws = Workspace(root, FileLimits(max_list_entries=3))
    assert ws.list_dir("src") == ["app.py", "f0.py", "f1.py", "… 3 more entries not shown"]


def test_list_dir_of_a_file_is_refused(ws: Workspace) -> None:
    with pytest.raises(PathNotDirectory):
        ws.list_dir("notes.txt")


def test_glob_matches_recursively_and_sorts(ws: Workspace, root: Path) -> None:
    (root / "src" / "pkg").mkdir()
    (root / "src" / "pkg" / "mod.py").write_text("")
    (root / "top.py").write_text("")
    assert ws.glob("**/*.py") == ["src/app.py", "src/pkg/mod.py", "top.py"]
    assert ws.glob("src/*") == ["src/app.py", "src/pkg/"]
    assert ws.glob("*.txt") == ["notes.txt"]


def test_glob_skips_hidden_entries_unless_named(ws: Workspace, root: Path) -> None:
    (root / ".github").mkdir()
    (root / ".github" / "ci.yml").write_text("")
    assert ws.glob("**/*.yml") == []
    assert ws.glob(".github/*.yml") == [".github/ci.yml"]


@pytest.mark.parametrize("pattern", ["**", "**/*", ".halo/*", "**/*.db", ".*/*", "**/events.*"])
def test_glob_never_shows_halo(ws: Workspace, pattern: str) -> None:
    assert not any(".halo" in hit for hit in ws.glob(pattern))


@pytest.mark.parametrize("pattern", ["../*", "src/../../*", "/etc/*"])
def test_glob_refuses_dotdot_and_absolute_patterns(ws: Workspace, pattern: str) -> None:
    with pytest.raises(PathNotAccessible):
        ws.glob(pattern)


def test_glob_does_not_follow_symlinks_out(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "leak").symlink_to(outside, target_is_directory=True)
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    assert ws.glob("**/*") == ["notes.txt", "src/", "src/app.py"]


def test_glob_caps_matches_with_a_note(root: Path) -> None:
    for i in range(5):
        (root / f"f{i}.md").write_text("")
    ws = Workspace(root, FileLimits(max_list_entries=2))
    hits = ws.glob("*.md")
    assert len(hits) == 3
    assert hits[-1].startswith("… more matches not shown")


def test_grep_reports_path_line_and_text(ws: Workspace) -> None:
    assert ws.grep(r"wor.d") == ["notes.txt:2: world"]
    assert ws.grep("print", "src/app.py") == ["src/app.py:2: print('hi')"]


def test_grep_bad_regex_is_invalid_input(ws: Workspace) -> None:
    with pytest.raises(InvalidInput, match="bad regular expression"):
        ws.grep("(unclosed")


def test_grep_skips_binary_files_halo_and_hidden(ws: Workspace, root: Path) -> None:
    (root / "blob.bin").write_bytes(b"SQLite\x00 hello")
    (root / ".env").write_text("hello=1\n")
    (root / ".halo" / "log.txt").write_text("hello from state\n")
    assert ws.grep("hello") == ["notes.txt:1: hello"]


def test_grep_glob_filters_files(ws: Workspace, root: Path) -> None:
    (root / "src" / "notes.md").write_text("import this\n")
    assert ws.grep("import", glob="*.py") == ["src/app.py:1: import os"]
    assert ws.grep("import", glob="src/*.md") == ["src/notes.md:1: import this"]


def test_grep_caps_matches_with_a_note(root: Path) -> None:
    (root / "many.txt").write_text("x\n" * 10)
    ws = Workspace(root, FileLimits(max_grep_matches=3))
    hits = ws.grep("x", "many.txt")
    assert hits[:3] == ["many.txt:1: x", "many.txt:2: x", "many.txt:3: x"]
    assert hits[3].startswith("… stopped after 3 matches")


def test_grep_skips_symlinks_leading_outside(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "leakdir").symlink_to(outside, target_is_directory=True)
    assert ws.grep("secret") == []


def test_grep_in_halo_is_refused(ws: Workspace) -> None:
    with pytest.raises(PathNotAccessible):
        ws.grep("x", ".halo")


def test_resolve_for_serving_returns_the_file_realpath(ws: Workspace, root: Path) -> None:
    (root / "alias.txt").symlink_to("src/app.py")
    assert ws.resolve_for_serving("alias.txt") == root / "src" / "app.py"


def test_resolve_for_serving_refuses_a_directory(ws: Workspace) -> None:
    with pytest.raises(PathIsDirectory):
        ws.resolve_for_serving("src")


def test_messages_never_show_absolute_workspace_path(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "gone.txt").symlink_to("nowhere.txt")
    (root / "bin.dat").write_bytes(b"\x00")
    (root / "blocker").write_text("a file, not a directory")
    (root / "big.txt").write_text("x" * (FileLimits().max_read_bytes + 1))
    attempts: list[Callable[[], object]] = [
        lambda: ws.read_text(str(root / "notes.txt")),
        lambda: ws.read_text("../ws/../outside/secret.txt"),
        lambda: ws.read_text("leak.txt"),
        lambda: ws.read_text("gone.txt"),
        lambda: ws.read_text("missing.txt"),
        lambda: ws.read_text("bin.dat"),
        lambda: ws.read_text("src"),
        lambda: ws.write_text("blocker/child.txt", "x"),
        lambda: ws.edit("notes.txt", "absent", "x"),
        lambda: ws.list_dir("notes.txt"),
        lambda: ws.resolve_for_serving(".halo/events.db"),
        lambda: ws.grep("x", "missing-dir"),
        lambda: ws.read_text("big.txt"),
    ]
    messages = []
    for attempt in attempts:
        with pytest.raises(WorkspaceError) as caught:
            attempt()
        messages.append(str(caught.value))
    for message in messages:
        assert str(root) not in message
        assert str(root.parent) not in message


_SEGMENTS = st.sampled_from(["a", "..", ".", ".halo", "x/../..", "src", "up", "state", "notes.txt"])


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segments=st.lists(_SEGMENTS, min_size=1, max_size=6), must_exist=st.booleans())
def test_random_relative_paths_never_escape_or_reach_halo(
    root: Path, outside: Path, segments: list[str], must_exist: bool
) -> None:
    if not (root / "up").is_symlink():
        (root / "up").symlink_to(outside, target_is_directory=True)
        (root / "state").symlink_to(".halo", target_is_directory=True)
    ws = Workspace(root)
    try:
        resolved = ws.resolve("/".join(segments), must_exist=must_exist)
    except WorkspaceError:
        return
    real_root = Path(os.path.realpath(root))
    assert resolved == real_root or real_root in resolved.parents
    assert resolved != real_root / ".halo"
    assert real_root / ".halo" not in resolved.parents
