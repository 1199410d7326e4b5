"""The README's embedding example is a program a newcomer pastes: it must run as written."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import trio

from halo_actors.core import ids
from halo_actors.core.log import SqliteEventLog
from halo_actors.core.state import replay

README = Path(__file__).resolve().parents[1] / "README.md"


def embedding_example() -> str:
    section = README.read_text().split("## Embedding", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "the Embedding section shows a Python block"
    return found.group(1)


async def test_the_readme_embedding_example_runs_in_an_empty_directory(tmp_path: Path) -> None:
    program = tmp_path / "example.py"
    program.write_text(embedding_example())
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(program)], cwd=tmp_path, capture_stdout=True, capture_stderr=True
        )
    assert done.stderr == b""
    log = await SqliteEventLog.open(
        tmp_path / "my-workspace" / ".halo" / "events.db", read_only=True
    )
    try:
        records = await log.read()
    finally:
        await log.aclose()
    sessions = {r.session_id for r in records}
    (root,) = [s for s in sessions if ids.is_root(s)]
    assert len(sessions) == 3 and all(ids.parent_of(s) == root for s in sessions - {root})
    final = replay(root, [r for r in records if r.session_id == root])
    assert done.stdout.decode() == final.last_output + "\n"  # what the example printed
    assert final.last_output and not final.turn_open and not final.mailbox
