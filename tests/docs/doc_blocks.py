"""The fenced code blocks of the README and ``docs/``, and how each one is run.

A block's language decides what "it runs" means: ``python`` is a program, run
alone; ``sh`` blocks of one file form one shell session, run in order (a server
one block starts in the background serves the next block's ``curl``); ``json`` and
``toml`` must parse. ``text`` and untagged blocks show output, not code.

An HTML comment right above a block can say how it runs:
``<!-- doc-test: cwd=repo -->`` (in the repository, not a scratch directory) or
``<!-- doc-test: skip: <why> -->`` (a reason is required; the test lists them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(
    r"(?:<!-- doc-test: (?P<directive>[^>]*?) -->\n)?^```(?P<lang>[a-z]*)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
CODE = ("python", "sh", "json", "toml")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    lang: str
    body: str
    directive: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        if not self.directive.startswith("skip"):
            return None
        return self.directive.removeprefix("skip").lstrip(": ").strip()

    @property
    def in_repo(self) -> bool:
        return self.directive == "cwd=repo"


def blocks(document: Path) -> list[Block]:
    text = document.read_text()
    return [
        Block(
            document,
            text.count("\n", 0, found.start("lang")) + 1,
            found["lang"],
            found["body"],
            (found["directive"] or "").strip(),
        )
        for found in _FENCE.finditer(text)
    ]


def code_blocks(lang: str) -> list[Block]:
    return [b for doc in DOCUMENTS for b in blocks(doc) if b.lang == lang]


def shell_documents() -> list[Path]:
    return [doc for doc in DOCUMENTS if any(b.lang == "sh" for b in blocks(doc))]
