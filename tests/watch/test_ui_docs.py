"""``docs/ui.md`` shows the page (a committed screenshot) and the two terminal commands."""

from __future__ import annotations

import re
from pathlib import Path

from halo_actors.cli import build_parser

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_ui_doc_shows_the_page_and_both_commands() -> None:
    text = (DOCS / "ui.md").read_text()
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text)
    assert images, "the page's screenshot is shown"
    for image in images:
        data = (DOCS / image).read_bytes()
        assert data.startswith(b"\x89PNG"), image
    assert "python -m halo_actors watch --url" in text
    assert "python -m halo_actors history --workspace" in text


def test_the_documented_command_lines_parse() -> None:
    parser = build_parser()
    watch = parser.parse_args(["watch", "--url", "http://127.0.0.1:9527", "--token", "t", "s"])
    assert (watch.command, watch.url, watch.session) == ("watch", "http://127.0.0.1:9527", "s")
    history = parser.parse_args(["history", "--workspace", "/w", "s", "--json"])
    assert (history.command, history.workspace, history.json) == ("history", "/w", True)
