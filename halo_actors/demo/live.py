"""The live terminal view (rich): the session tree, what each node does, a scrolling feed.

While a scenario plays, one ``rich.live.Live`` region shows the tree (each
node's state: idle / running / in tool / stopped / archived, its pending tool
call, its queued message count and the tail of the text it is streaming) above
the latest events with their sequence numbers. Narration, checks and snapshots
print above the region; the summary prints when the scenario ends and the
region's last frame stays on screen.

The region fits the terminal (:func:`layout_for`): it never takes more than the
height left after ``narration_room`` lines, so narration and checks printed above
it stay readable while the next events arrive, and a region never grows taller
than the screen (rich cannot redraw what scrolled off; Ctrl-C used to leave a
second top border). On a narrow terminal the tree drops its "streaming" column
and lets a tool call wrap onto a second line instead of cutting it short.
Narration and checks wrap with a hanging indent. While the region is up, the
terminal does not echo control characters: a redraw leaves the cursor at the last
column, where an echoed ``^C`` wrapped onto a new line and the final redraw then
started one line low (the region's top border stayed on screen twice). Methods that
write are also protected from KeyboardInterrupt (trio delivers it at the next
checkpoint), so a Ctrl-C never lands in the middle of a redraw.

Invariants: every string from the log is drawn as ``rich.text.Text`` (never as
markup, so ``[interrupted by user]`` shows as written); the region is redrawn
only from :meth:`LiveView.tick` (the tour's redraw task, on the trio thread),
never from a background thread.
"""

from __future__ import annotations

import contextlib
import io
import os
import termios
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from trio.lowlevel import enable_ki_protection

from ..core.events import Record, kind_of
from .board import Board, Row
from .feed import describe, one_line
from .scenario import Check, Scenario
from .view import summary_lines, tree_lines

FEED_MAX = 14
"""Events the feed shows on a tall terminal."""
WIDE = 120
"""Columns from which the tree shows its "streaming" column."""
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


@dataclass(frozen=True)
class Layout:
    """How the region is drawn on a terminal of ``width`` × ``height``."""

    width: int
    height: int
    wide: bool
    narration_room: int
    """Lines kept free above the region for narration and checks."""
    name_width: int
    kind_width: int

    def feed_lines(self, tree_rows: int) -> int:
        """Feed lines that fit: the region is two panels (2 borders each) and the
        tree's header and rows; at least 3, at most :data:`FEED_MAX`."""
        tree_height = 2 + 1 + tree_rows * (1 if self.wide else 2)
        room = self.height - self.narration_room - tree_height - 2
        return max(3, min(FEED_MAX, room))


def layout_for(width: int, height: int) -> Layout:
    wide = width >= WIDE
    return Layout(
        width=width,
        height=height,
        wide=wide,
        narration_room=max(4, height // 4),
        name_width=18 if wide else 13,
        kind_width=17 if wide else 14,
    )


def tree_table(rows: Sequence[Row], layout: Layout | None = None) -> Table:
    """The tree; on a narrow terminal (``layout.wide`` false) a tool call may wrap to a
    second line and the queued count and streamed text share the call's column."""
    wide = layout is None or layout.wide
    table = Table(expand=True, show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("session", no_wrap=True, max_width=28)
    table.add_column("state", no_wrap=True, width=9)
    table.add_column("tool call", no_wrap=wide, ratio=3, overflow="ellipsis" if wide else "fold")
    if wide:
        table.add_column("queued", justify="right", width=6)
        table.add_column("streaming", no_wrap=True, ratio=2)
    for row in rows:
        branch = "  " * (row.depth - 1) + "└ " if row.depth else ""
        cells = [
            Text(branch + row.label),
            Text(row.state, style=STATE_STYLES.get(row.state, "")),
        ]
        if wide:
            cells += [
                Text(one_line(row.tool, 100), style="cyan"),
                Text(str(row.queued) if row.queued else "", style="bold green"),
                Text(_tail(row.saying, 40), style="italic dim"),
            ]
        else:
            cells.append(_narrow_call(row))
        table.add_row(*cells)
    return table


def _narrow_call(row: Row) -> Text:
    """The call (up to two lines), then ``+N queued``; else the streamed text's tail."""
    text = Text(one_line(row.tool, 120), style="cyan") if row.tool else Text()
    if row.queued:
        text.append(f"{'  ' if row.tool else ''}+{row.queued} queued", style="bold green")
    if not row.tool and not row.queued and row.saying:
        text.append(f"“…{one_line(row.saying, 40)[-24:]}”", style="italic dim")
    return text


def _tail(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def hanging(mark: str, text: str, style: str) -> Table:
    """``mark text`` whose wrapped lines start under the text, not under the mark."""
    grid = Table.grid()
    grid.add_column(width=len(mark) + 1 if mark else 3, no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row(Text(mark, style=style), Text(text, style=style))
    return grid


def quiet_control_echo(out: TextIO) -> Callable[[], None]:
    """Turn off the terminal's echo of control characters (``^C``) on ``out`` if it is
    a terminal; returns the function that restores the previous setting."""
    try:
        fd = out.fileno()
        if not os.isatty(fd):
            return lambda: None
        before = termios.tcgetattr(fd)
        quiet = list(before)
        quiet[3] &= ~termios.ECHOCTL
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
    except (OSError, ValueError, io.UnsupportedOperation, termios.error):
        return lambda: None

    def restore() -> None:
        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(fd, termios.TCSANOW, before)

    return restore


class LiveView:
    def __init__(self, out: TextIO, *, console: Console | None = None) -> None:
        self._out = out
        self._restore_echo: Callable[[], None] | None = None
        self._console = console or Console(file=out)
        self._board = Board()
        self._records: deque[Record] = deque(maxlen=FEED_MAX)
        self._live: Live | None = None
        self._title = ""
        self._dirty = False

    def layout(self) -> Layout:
        size = self._console.size
        return layout_for(size.width, size.height)

    def render(self) -> RenderableType:
        """The region as it would be drawn now (what :meth:`tick` shows)."""
        layout = self.layout()
        rows = self._board.rows()
        shown = list(self._records)[-layout.feed_lines(len(rows)) :]
        lines = [self._feed_line(record, layout) for record in shown]
        feed = Group(*lines) if lines else Text("(no events yet)", style="dim")
        return Group(
            Panel(tree_table(rows, layout), title=self._title, title_align="left"),
            Panel(feed, title="events", title_align="left", style="dim"),
        )

    def _feed_line(self, record: Record, layout: Layout) -> Text:
        kind = kind_of(record.event)
        name = one_line(self._board.name(record.session_id), layout.name_width)
        return Text.assemble(
            (f"#{record.seq:<4} ", "dim"),
            (f"{name:<{layout.name_width}} ", "bold"),
            (
                f"{one_line(kind, layout.kind_width):<{layout.kind_width}} ",
                KIND_STYLES.get(kind, ""),
            ),
            one_line(describe(record) or "", 200),
            no_wrap=True,
            overflow="ellipsis",
        )

    def _print(self, renderable: RenderableType, *, cut: bool = False) -> None:
        """Print above the region; ``cut``: one line, ended with … at the terminal's edge."""
        console = self._live.console if self._live is not None else self._console
        if cut:
            console.print(renderable, no_wrap=True, overflow="ellipsis")
        else:
            console.print(renderable)

    @enable_ki_protection
    def begin(self, scenario: Scenario) -> None:
        self._board, self._records = Board(), deque(maxlen=FEED_MAX)
        self._title = f"{scenario.name} · session tree"
        self._console.rule(Text(f"{scenario.name} · {scenario.title}", style="bold"))
        self._live = Live(
            self.render(), console=self._console, auto_refresh=False, vertical_overflow="crop"
        )
        self._restore_echo = quiet_control_echo(self._out)
        self._live.start()

    def record(self, record: Record) -> None:
        self._board.apply(record)
        if describe(record) is None:
            return
        self._records.append(record)
        self._dirty = True

    @enable_ki_protection
    def note(self, text: str) -> None:
        self._print(hanging("»", text, "bold"))

    @enable_ki_protection
    def check(self, check: Check) -> None:
        mark, style = ("✓", "green") if check.ok else ("✗", "bold red")
        self._print(hanging(mark, check.label, style))

    @enable_ki_protection
    def snapshot(self, label: str, rows: Sequence[Row]) -> None:
        """The tree at a moment, one line per session (cut at the terminal's width: the
        region above shows the same calls whole)."""
        lines = [f"  {label}:", *(f"    {x}" for x in tree_lines(rows))]
        for line in lines:
            self._print(Text(line), cut=True)

    @enable_ki_protection
    def finish(self, scenario: Scenario, checks: Sequence[Check]) -> None:
        self.tick(force=True)
        self.close()
        for line in summary_lines(scenario, checks):
            bullet, _, point = line.partition("• ")
            if point:
                self._console.print(hanging(bullet + "•", point, "bold"))
            else:
                self._console.print(
                    hanging("", line.strip(), "bold")
                    if line.startswith("   ")
                    else Text(line, style="bold")
                )

    @enable_ki_protection
    def tick(self, force: bool = False) -> None:
        if self._live is not None and (self._dirty or force):
            self._live.update(self.render(), refresh=True)
            self._dirty = False

    @enable_ki_protection
    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._restore_echo is not None:
            self._restore_echo()
            self._restore_echo = None
