"""How a demo run is shown: the :class:`View` protocol and its plain and JSON forms.

A view is told, in order: a scenario began, each logged record (seq order),
narration, checks, tree snapshots, and the scenario's summary. Views never
block and never touch the runtime; the live (rich) view is in :mod:`.live`.

- :class:`PlainView` writes one line per shown event (see :mod:`.feed`) plus
  narration (``»``), checks (``✓`` / ``✗``) and the summary; for logs and CI.
- :class:`JsonView` writes one JSON object per line: every record exactly as
  stored (``{"seq", "sessionId", "ts", "event"}``), and the demo's own lines
  tagged ``{"demo": "begin" | "note" | "check" | "tree" | "summary", …}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TextIO

import msgspec

from ..core.events import Record, encode_record
from .board import Board, Row
from .feed import one_line, plain_line
from .scenario import Check, Scenario

_json = msgspec.json.Encoder()


class View(Protocol):
    def begin(self, scenario: Scenario) -> None: ...
    def record(self, record: Record) -> None: ...
    def note(self, text: str) -> None: ...
    def check(self, check: Check) -> None: ...
    def snapshot(self, label: str, rows: Sequence[Row]) -> None: ...
    def finish(self, scenario: Scenario, checks: Sequence[Check]) -> None: ...
    def tick(self) -> None:
        """Called a few times a second while a scenario plays (redraws a live view)."""
        ...

    def close(self) -> None: ...


def tree_lines(rows: Sequence[Row]) -> list[str]:
    """The tree as indented text: name, state, pending tool call, queued count."""
    lines = []
    for row in rows:
        indent = "  " * row.depth + ("└ " if row.depth else "")
        queued = f"  queued {row.queued}" if row.queued else ""
        tool = f"  [{one_line(row.tool, 50)}]" if row.tool else ""
        saying = f"  says “…{row.saying[-30:]}”" if row.saying else ""
        lines.append(f"{indent + row.label:<22} {row.state:<9}{tool}{queued}{saying}".rstrip())
    return lines


def summary_lines(scenario: Scenario, checks: Sequence[Check]) -> list[str]:
    passed = sum(c.ok for c in checks)
    lines = [f"── {scenario.name}: what this showed ({passed}/{len(checks)} checks passed)"]
    lines += [f"   • {point}" for point in scenario.shown]
    lines += [f"   read more: {', '.join(scenario.docs)}"]
    return lines


class PlainView:
    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._board = Board()

    def _write(self, *lines: str) -> None:
        for line in lines:
            self._out.write(line + "\n")
        self._out.flush()

    def begin(self, scenario: Scenario) -> None:
        self._board = Board()
        self._write("", f"══ {scenario.name} · {scenario.title}")

    def record(self, record: Record) -> None:
        self._board.apply(record)
        line = plain_line(record, self._board.name(record.session_id))
        if line is not None:
            self._write(line)

    def note(self, text: str) -> None:
        self._write(f"» {text}")

    def check(self, check: Check) -> None:
        self._write(f"{'✓' if check.ok else '✗'} {check.label}")

    def snapshot(self, label: str, rows: Sequence[Row]) -> None:
        self._write(f"   {label}:", *(f"     {line}" for line in tree_lines(rows)))

    def finish(self, scenario: Scenario, checks: Sequence[Check]) -> None:
        self._write(*summary_lines(scenario, checks))

    def tick(self) -> None:
        pass

    def close(self) -> None:
        self._out.flush()


def row_json(row: Row) -> dict[str, object]:
    return {
        "sessionId": row.session_id,
        "name": row.name,
        "agent": row.agent,
        "state": row.state,
        "tool": row.tool,
        "queued": row.queued,
    }


class JsonView:
    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._scenario = ""

    def _line(self, data: bytes) -> None:
        self._out.write(data.decode() + "\n")
        self._out.flush()

    def _demo(self, kind: str, **fields: object) -> None:
        self._line(_json.encode({"demo": kind, "scenario": self._scenario, **fields}))

    def begin(self, scenario: Scenario) -> None:
        self._scenario = scenario.name
        self._demo("begin", title=scenario.title)

    def record(self, record: Record) -> None:
        self._line(encode_record(record))

    def note(self, text: str) -> None:
        self._demo("note", text=text)

    def check(self, check: Check) -> None:
        self._demo("check", label=check.label, ok=check.ok)

    def snapshot(self, label: str, rows: Sequence[Row]) -> None:
        self._demo("tree", label=label, sessions=[row_json(r) for r in rows])

    def finish(self, scenario: Scenario, checks: Sequence[Check]) -> None:
        ok = all(c.ok for c in checks)
        self._demo("summary", ok=ok, shown=list(scenario.shown), docs=list(scenario.docs))

    def tick(self) -> None:
        pass

    def close(self) -> None:
        self._out.flush()
