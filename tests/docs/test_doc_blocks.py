"""Every code block in the README and ``docs/`` runs as written (``doc_blocks.py`` says
how each kind is run).

A local Anthropic Messages endpoint stands in for the model API in every block
(``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``; ``fake_anthropic.py``). Shell blocks
run in a scratch directory with this environment's ``bin/`` first on
``PATH`` (what ``. .venv/bin/activate`` does) and ``$HALO_ACTORS_HOME`` unset; the
changes made to them: the documented ports 9527 and 9528 are replaced by free ones (runs
in parallel never collide), and a ``demo`` command plays at ``--speed 0.2`` (the same
tour, with shorter pauses for a reader). Background jobs a session starts are killed
at its end.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import fake_anthropic
import pg_support
import pytest
import trio
from doc_blocks import CODE, DOCUMENTS, ROOT, Block, blocks, code_blocks, shell_documents

from halo_actors.runtime.profiles import load_profile

BUDGET = 120.0
BIN = Path(sys.executable).parent
DOC_PORTS = ("9527", "9528")
NEEDS_PG = "needs postgresql"
"""The directive of a block that talks to PostgreSQL: its document's session then needs
the test server (or skips where PostgreSQL tests skip), and its schema ``halo_deploy``
becomes a fresh one of this run (dropped at the end)."""
DOC_SCHEMA = "halo_deploy"


def free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


@pytest.fixture
async def model_url() -> AsyncIterator[str]:
    """A local Anthropic Messages endpoint (``fake_anthropic``) for the docs' real-model
    steps: the documented programs read ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY``."""
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(fake_anthropic.serve)
        yield url
        nursery.cancel_scope.cancel()


def environment(home: Path, model_url: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("HALO_", "ANTHROPIC_", "OPENAI_"))
    }
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", HOME=str(home))
    env["VIRTUAL_ENV"] = str(BIN.parent)
    env.update(ANTHROPIC_BASE_URL=model_url, ANTHROPIC_API_KEY=fake_anthropic.KEY)
    return env


async def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    with trio.fail_after(BUDGET):
        done = await trio.run_process(
            argv, cwd=cwd, env=env, check=False, capture_stdout=True, stderr=-2
        )
    return done.returncode, done.stdout.decode(errors="replace")


def shell_session(
    document: Path, scratch: Path, ports: dict[str, str], schema: str = DOC_SCHEMA
) -> str:
    """One bash script of the document's ``sh`` blocks, in order."""
    parts = [
        "set -euo pipefail",
        "trap 'kill $(jobs -p) 2>/dev/null || true; wait || true' EXIT",
    ]
    for block in blocks(document):
        if block.lang != "sh" or block.skip_reason is not None:
            continue
        parts.append(f"cd {ROOT if block.in_repo else scratch}")
        parts.append(f"echo '## {block.name}'")
        body = re.sub(r"\b(9527|9528)\b", lambda m: ports[m.group(1)], block.body)
        parts.append(_fast_demo(body.replace(DOC_SCHEMA, schema)))
    return "\n".join(parts) + "\n"


def _fast_demo(body: str) -> str:
    lines = []
    for line in body.splitlines():
        command, hash_, comment = line.partition("  #")
        if command.startswith("python -m halo_actors demo") and "--list" not in command:
            line = f"{command.rstrip()} --speed 0.2  {hash_}{comment}".rstrip()
        lines.append(line)
    return "\n".join(lines)


@pytest.mark.parametrize("document", shell_documents(), ids=lambda d: d.name)
async def test_the_shell_blocks_of_a_document_run_as_written(
    document: Path, tmp_path: Path, model_url: str, request: pytest.FixtureRequest
) -> None:
    """Rule: every command in the README and docs works as written (in the environment
    `make` created, activated)."""
    schema = DOC_SCHEMA
    if any(b.directive == NEEDS_PG for b in blocks(document)):
        schemas: pg_support.SchemaFactory = request.getfixturevalue("pg_schemas")
        schema = schemas.new()
    ports = {port: free_port() for port in DOC_PORTS}
    script = shell_session(document, tmp_path, ports, schema)
    (tmp_path / "session.sh").write_text(script)
    code, output = await run(
        ["bash", str(tmp_path / "session.sh")], tmp_path, environment(tmp_path, model_url)
    )
    assert code == 0, output[-4000:]
    assert "Traceback" not in output, output[-4000:]


@pytest.mark.parametrize("block", code_blocks("python"), ids=lambda b: b.name)
async def test_a_python_block_runs_as_a_program(
    block: Block, tmp_path: Path, model_url: str
) -> None:
    """Rule: every code block in the docs runs in a test."""
    if block.skip_reason is not None:
        pytest.skip(block.skip_reason)
    program = tmp_path / "block.py"
    program.write_text(block.body)
    cwd = ROOT if block.in_repo else tmp_path
    code, output = await run([sys.executable, str(program)], cwd, environment(tmp_path, model_url))
    assert code == 0, output[-4000:]


@pytest.mark.parametrize("block", code_blocks("json"), ids=lambda b: b.name)
def test_a_json_block_parses(block: Block) -> None:
    for line in block.body.splitlines() if block.body.lstrip().startswith('{"') else ():
        json.loads(line)  # one JSON document per line (frames, messages)
    if not block.body.lstrip().startswith('{"'):
        json.loads(block.body)


@pytest.mark.parametrize("block", code_blocks("toml"), ids=lambda b: b.name)
def test_a_toml_block_is_a_valid_agent_profile(block: Block, tmp_path: Path) -> None:
    tomllib.loads(block.body)
    path = tmp_path / "researcher.toml"
    path.write_text(block.body)
    assert load_profile(path).name == "researcher"


def test_every_block_is_code_of_a_known_kind_or_output() -> None:
    """A block in a language no test runs would be silently unchecked."""
    unchecked = {
        b.name
        for doc in DOCUMENTS
        for b in blocks(doc)
        if b.lang not in (*CODE, "text", "") and b.skip_reason is None
    }
    assert unchecked == set(), "run these blocks in a test, or say why not (doc-test: skip)"
    skipped = [b for doc in DOCUMENTS for b in blocks(doc) if b.directive.startswith("skip")]
    assert all(b.skip_reason for b in skipped), "a skipped block says why"
