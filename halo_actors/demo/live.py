"""The live terminal view (rich): the session tree, what each node does, a scrolling feed.

While a scenario plays, one ``rich.live.Live`` region shows the tree (each
node's state: idle / running / in tool / stopped / archived, its pending tool
call, its queued message count and the tail of the text it is streaming) above
the last ``FEED_LINES`` events with their sequence numbers. Narration, checks
and snapshots print above the region; the summary prints when the scenario ends
and the region's last frame stays on screen.

Invariants: every string from the log is drawn as ``rich.text.Text`` (never as
markup, so ``[interrupted by user]`` shows as written); the region is redrawn
only from :meth:`LiveView.tick` (the tour's redraw task, on the trio thread),
never from a background thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..core.events import Record, kind_of
from .board import Board, Row
from .feed import describe, one_line
from .scenario import Check, Scenario
from .view import summary_lines, tree_lines

FEED_LINES = 14
STATE_STYLES = {
    "idle": "dim",
    "running": "bold yellow",
    "in tool": "bold cyan",
    "stopped": "magenta",
    "archived": "dim strike",
}
KIND_STYLES = {
    "user": "bold green",
    "message_queued": "green",
    "tool_call": "cyan",
    "tool_result": "cyan",
    "error": "bold red",
    "complete": "blue",
    "report_sent": "magenta",
    "mailbox_folded": "bold magenta",
    "mailbox_discarded": "bold magenta",
    "flags": "yellow",
}


def tree_table(rows: Sequence[Row]) -> Table:
    table = Table(expand=True, show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("session", no_wrap=True, ratio=2)
    table.add_column("state", no_wrap=True, width=9)
    table.add_column("tool call", no_wrap=True, ratio=3)
    table.add_column("queued", justify="right", width=6)
    table.add_column("streaming", no_wrap=True, ratio=3)
    for row in rows:
        branch = "  " * (row.depth - 1) + "└ " if row.depth else ""
        table.add_row(
            Text(branch + row.label),
            Text(row.state, style=STATE_STYLES.get(row.state, "")),
            Text(one_line(row.tool, 60), style="cyan"),
            Text(str(row.queued) if row.queued else "", style="bold green"),
            Text(row.saying[-30:], style="italic dim"),
        )
    return table


class LiveView:
    def __init__(self, out: TextIO) -> None:
        self._console = Console(file=out)
        self._board = Board()
        self._feed: deque[Text] = deque(maxlen=FEED_LINES)
        self._live: Live | None = None
        self._title = ""
        self._dirty = False

    def _render(self) -> RenderableType:
        feed = Group(*self._feed) if self._feed else Text("(no events yet)", style="dim")
        return Group(
            Panel(tree_table(self._board.rows()), title=self._title, title_align="left"),
            Panel(feed, title="events", title_align="left", style="dim"),
        )

    def _print(self, renderable: RenderableType) -> None:
        console = self._live.console if self._live is not None else self._console
        console.print(renderable)

    def begin(self, scenario: Scenario) -> None:
        self._board, self._feed = Board(), deque(maxlen=FEED_LINES)
        self._title = f"{scenario.name} · session tree"
        self._console.rule(Text(f"{scenario.name} · {scenario.title}", style="bold"))
        self._live = Live(self._render(), console=self._console, auto_refresh=False)
        self._live.start()

    def record(self, record: Record) -> None:
        self._board.apply(record)
        detail = describe(record)
        if detail is None:
            return
        kind = kind_of(record.event)
        self._feed.append(
            Text.assemble(
                (f"#{record.seq:<4} ", "dim"),
                (f"{self._board.name(record.session_id):<18} ", "bold"),
                (f"{kind:<17} ", KIND_STYLES.get(kind, "")),
                one_line(detail, 100),
                no_wrap=True,
                overflow="ellipsis",
            )
        )
        self._dirty = True

    def note(self, text: str) -> None:
        self._print(Text(f"» {text}", style="bold"))

    def check(self, check: Check) -> None:
        mark, style = ("✓", "green") if check.ok else ("✗", "bold red")
        self._print(Text(f"{mark} {check.label}", style=style))

    def snapshot(self, label: str, rows: Sequence[Row]) -> None:
        self._print(Text("\n".join([f"  {label}:", *(f"    {x}" for x in tree_lines(rows))])))

    def finish(self, scenario: Scenario, checks: Sequence[Check]) -> None:
        self.tick(force=True)
        self.close()
        self._console.print(Text("\n".join(summary_lines(scenario, checks)), style="bold"))

    def tick(self, force: bool = False) -> None:
        if self._live is not None and (self._dirty or force):
            self._live.update(self._render(), refresh=True)
            self._dirty = False

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
