"""docs/models.md: its "write your own model" program runs as written, its profile
examples load, and its commands name options that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import trio

from halo_actors.cli import build_parser
from halo_actors.runtime.profiles import load_profile

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.DOTALL)


async def test_the_write_your_own_model_example_runs(tmp_path: Path) -> None:
    """Rule: "write your own model" with a short complete example (a test runs it)."""
    program = next(b for b in blocks("python") if "class ShoutingModel" in b)
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-c", program],
            cwd=tmp_path,
            capture_stdout=True,
            stderr=subprocess.STDOUT,
        )
    assert done.stdout.decode().strip() == "HELLO FROM MY OWN MODEL"


def test_the_profile_examples_load(tmp_path: Path) -> None:
    examples = [b for b in blocks("toml") if "model =" in b]
    assert len(examples) == 2
    for index, text in enumerate(examples):
        path = tmp_path / f"agent{index}.toml"
        path.write_text(text)
        profile = load_profile(path)
        assert profile.model.startswith(("anthropic:", "openai:"))


def test_the_serve_commands_parse() -> None:
    commands = [
        line.split("python -m halo_actors ", 1)[1]
        for block in blocks("sh")
        for line in block.splitlines()
        if "python -m halo_actors serve" in line
    ]
    assert len(commands) >= 4
    for command in commands:
        args = build_parser().parse_args(command.replace("~/project", "/tmp/p").split())
        assert args.command == "serve" and args.model.startswith(("anthropic:", "openai:"))
