"""Runtime state is hidden at any depth, and state files are private (``docs/security.md``)."""

from __future__ import annotations

import stat
from pathlib import Path

import trio
from web_client import Harness, sse

HIDDEN = {"error": "path is not accessible"}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_runtime_state_at_any_depth_and_the_token_directory_are_403_for_every_level(
    harness: Harness,
) -> None:
    """Every ``.halo`` path component, the event-log files and the token state directory
    → 403 for every level (a token bound to the *parent* of a workspace used to read
    ``wsA/.halo/events.db-wal`` and the state directory's ``tokens.json``)."""
    parent = harness.tmp
    (parent / "backup").mkdir()
    (parent / "backup" / "events.db").write_bytes(b"a copied log")
    (parent / "backup" / "events.db-halo-journal").write_bytes(b"a copied journal")
    (parent / "notes.txt").write_text("visible\n")
    paths = [
        "ws/.halo/events.db",
        "ws/.halo/events.db-wal",
        "ws/.halo/events.db-shm",
        "ws/.halo",
        "ws/../ws/.halo/events.db",
        "backup/events.db",
        "backup/events.db-halo-journal",
        "ws/.halo/events.db-halo-journal",
        "state/tokens.json",
        "state",
    ]
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:  # writes ws/.halo/events.db*
            await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
        assert (harness.workspace / ".halo" / "events.db-wal").exists()
        for access in ("full", "workspace", "readonly"):
            token = harness.token(access, workspace=parent)
            async with harness.client(token) as client:
                visible = await client.get("/api/web/file", params={"path": "notes.txt"})
                assert visible.status_code == 200, (access, visible.text)
                for path in paths:
                    resp = await client.get("/api/web/file", params={"path": path})
                    assert resp.status_code == 403, (access, path, resp.status_code)
                    assert resp.json() == HIDDEN, (access, path)


async def test_the_event_log_and_state_files_are_0600_in_0700_directories(
    harness: Harness,
) -> None:
    """The event log and state files are created 0600, their directories 0700
    (``events.db*`` incl. ``-wal``/``-shm`` and the journal, ``tokens.json``)."""
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
    halo = harness.workspace / ".halo"
    names = ("events.db", "events.db-wal", "events.db-shm", "events.db-halo-journal")
    files = [halo / name for name in names]
    files.append(harness.store.path)
    for path in files:
        assert path.exists(), path
        assert _mode(path) == 0o600, (path, oct(_mode(path)))
    for directory in (halo, harness.store.state_dir):
        assert _mode(directory) == 0o700, (directory, oct(_mode(directory)))
