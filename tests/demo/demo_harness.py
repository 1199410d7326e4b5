"""The demo tests' harness: play scenarios in ``--json`` mode, in-process, and read back.

``play_json(tmp_path, name)`` plays one scenario (at ``SPEED``, faster than the
tour) through the real :class:`~halo_actors.demo.view.JsonView` into a buffer
and parses every line: stored records (decoded with the runtime's own codec)
and the demo's own lines (``{"demo": …}``). Tests assert the scenario's key
outcomes from those events.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import trio

from halo_actors.core.events import Event, Record, decode_record
from halo_actors.demo.tour import find, tour
from halo_actors.demo.view import JsonView

SPEED = 0.5
"""Pacing of the scenarios under test (the tour plays at 1.0)."""
BUDGET = 40.0
"""Real seconds one played scenario may take before the test fails."""

E = TypeVar("E", bound=Event)


@dataclass
class Played:
    ok: bool
    records: list[Record] = field(default_factory=list)
    lines: list[dict[str, Any]] = field(default_factory=list)
    """The demo's own lines (``{"demo": "note" | "check" | "tree" | …}``), in order."""

    def events(self, kind: type[E], session_id: str | None = None) -> list[E]:
        return [
            r.event
            for r in self.records
            if isinstance(r.event, kind) and session_id in (None, r.session_id)
        ]

    def seqs(self, kind: type[Event], session_id: str | None = None) -> list[int]:
        return [
            r.seq
            for r in self.records
            if isinstance(r.event, kind) and session_id in (None, r.session_id)
        ]

    def checks(self) -> dict[str, bool]:
        return {line["label"]: line["ok"] for line in self.lines if line["demo"] == "check"}

    def tree(self, label: str) -> list[dict[str, Any]]:
        found = [x for x in self.lines if x["demo"] == "tree" and x["label"] == label]
        assert found, f"no tree snapshot {label!r}"
        sessions: list[dict[str, Any]] = found[0]["sessions"]
        return sessions

    def session_named(self, name: str) -> str:
        """The id of the session whose display path is ``name`` (from any tree snapshot)."""
        for line in self.lines:
            for row in line.get("sessions", ()):
                if row["name"] == name:
                    return str(row["sessionId"])
        raise AssertionError(f"no session named {name!r}")


def parse(text: str) -> tuple[list[Record], list[dict[str, Any]]]:
    records, lines = [], []
    for line in text.splitlines():
        data = msgspec.json.decode(line)
        if isinstance(data, dict) and "demo" in data:
            lines.append(data)
        else:
            records.append(decode_record(line))
    return records, lines


async def play_json(tmp_path: Path, name: str, speed: float = SPEED) -> Played:
    """Play scenario ``name`` in JSON mode under ``tmp_path``; every line parsed."""
    out = io.StringIO()
    with trio.fail_after(BUDGET):
        ok = await tour(find([name]), tmp_path, JsonView(out), speed)
    records, lines = parse(out.getvalue())
    return Played(ok, records, lines)
