"""GET /api/web/file: inline serving, traversal, real symlinks, hidden runtime state."""

from __future__ import annotations

import os

import trio
from web_client import Harness, sse

HIDDEN = {"error": "path is not accessible"}


async def _prepare(harness: Harness) -> None:
    ws = harness.workspace
    (ws / "out").mkdir()
    (ws / "out" / "report.txt").write_text("the report\n")
    (harness.tmp / "secret.txt").write_text("outside\n")
    os.symlink(harness.tmp / "secret.txt", ws / "link_out")
    os.symlink(harness.tmp, ws / "dir_out")
    os.symlink(ws / "missing.txt", ws / "dangling")
    os.symlink(ws / "out" / "report.txt", ws / "link_in")
    os.symlink(ws / ".halo" / "events.db", ws / "link_db")
    os.symlink(ws / ".halo", ws / "halo_dir")
    async with harness.client(harness.token()) as client:  # creates .halo/events.db
        await sse(client, "POST", "/api/web/chat", json={"message": "hi"})


async def test_a_workspace_file_is_served_inline(harness: Harness) -> None:
    with trio.fail_after(10):
        await _prepare(harness)
        async with harness.client(harness.token("readonly")) as client:
            resp = await client.get("/api/web/file", params={"path": "out/report.txt"})
            via_link = await client.get("/api/web/file", params={"path": "link_in"})
    assert resp.status_code == 200 and resp.text == "the report\n"
    assert resp.headers["content-disposition"].startswith("inline")
    assert resp.headers["x-content-type-options"] == "nosniff"
    assert via_link.status_code == 200 and via_link.text == "the report\n"


async def test_traversal_and_symlinks_out_are_403(harness: Harness) -> None:
    with trio.fail_after(10):
        await _prepare(harness)
        async with harness.client(harness.token()) as client:
            for path in ("../secret.txt", "out/../../secret.txt", "/etc/passwd", "link_out"):
                resp = await client.get("/api/web/file", params={"path": path})
                assert resp.status_code == 403, path
                assert resp.json() == {"error": "path is outside the workspace"}
            nested = await client.get("/api/web/file", params={"path": "dir_out/secret.txt"})
            assert nested.status_code == 403


async def test_dangling_links_and_missing_files_are_404(harness: Harness) -> None:
    with trio.fail_after(10):
        await _prepare(harness)
        async with harness.client(harness.token()) as client:
            dangling = await client.get("/api/web/file", params={"path": "dangling"})
            missing = await client.get("/api/web/file", params={"path": "nope.txt"})
            directory = await client.get("/api/web/file", params={"path": "out"})
            no_path = await client.get("/api/web/file")
    assert dangling.status_code == 404 and dangling.json() == {"error": "file not found"}
    assert missing.status_code == 404
    assert directory.status_code == 400
    assert no_path.status_code == 400 and no_path.json() == {"error": "path is required"}


async def test_runtime_state_is_hidden_for_every_access_level(harness: Harness) -> None:
    hidden = [
        ".halo/events.db",
        ".halo/events.db-wal",
        ".halo/events.db-halo-journal",
        ".halo/events.db-shm",
        ".halo",
        "out/../.halo/events.db",
        "link_db",
        "halo_dir/events.db",
    ]
    with trio.fail_after(10):
        await _prepare(harness)
        for access in ("full", "workspace", "readonly"):
            async with harness.client(harness.token(access)) as client:
                for path in hidden:
                    resp = await client.get("/api/web/file", params={"path": path})
                    assert resp.status_code == 403, (access, path)
                    assert resp.json() == HIDDEN, (access, path)
