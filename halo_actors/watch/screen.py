"""What ``watch`` shows: the demo's live tree view on a terminal, plain lines elsewhere.

Both views fold every record into a :class:`~halo_actors.demo.board.Board` (the
runtime's own fold), so each node's state (running, in tool with its command, idle,
queued N, stopped, archived) is what a restart would rebuild.

- :class:`LiveWatch` (a terminal): one ``rich.live.Live`` region sized to the
  terminal: a status line, the tree, then as many of the latest events as fit. It is
  redrawn only from :meth:`LiveWatch.tick` (the command's redraw task), at most a
  few times a second; every string from the log is drawn as ``Text``, never markup.
- :class:`PlainWatch` (a pipe, a log file): one line per shown event (``#seq
  session kind detail``, the demo's plain feed) and one per connection change.
"""

from __future__ import annotations

from collections import deque
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from ..core.events import Record, kind_of
from ..demo.board import Board
from ..demo.feed import describe, one_line, plain_line
from ..demo.live import KIND_STYLES, tree_table

FEED_KEEP = 200
"""Events kept for the feed (the screen shows as many of the latest as fit)."""
CHROME = 7
"""Lines the live layout spends on its status line, panel borders and table header."""
STATUS_STYLES = {"live": "bold green", "connecting": "yellow", "reconnecting": "bold yellow"}


class LiveWatch:
    def __init__(self, out: TextIO, title: str) -> None:
        self._console = Console(file=out)
        self._board = Board()
        self._feed: deque[Text] = deque(maxlen=FEED_KEEP)
        self._title = title
        self._state, self._detail = "connecting", ""
        self._last_seq = 0
        self._dirty = True
        self._live = Live(self._render(), console=self._console, auto_refresh=False, screen=True)

    def __enter__(self) -> LiveWatch:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()

    def status(self, state: str, detail: str) -> None:
        self._state, self._detail = state, detail
        self._dirty = True

    def record(self, record: Record) -> None:
        self._board.apply(record)
        self._last_seq = record.seq
        detail = describe(record)
        if detail is not None:
            kind = kind_of(record.event)
            self._feed.append(
                Text.assemble(
                    (f"#{record.seq:<5}", "dim"),
                    (f"{self._board.name(record.session_id)[-15:]:<16}", "bold"),
                    (f"{kind[:16]:<17}", KIND_STYLES.get(kind, "")),
                    one_line(detail, 200),
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )
        self._dirty = True

    def tick(self) -> None:
        if self._dirty:
            self._live.update(self._render(), refresh=True)
            self._dirty = False

    def _render(self) -> RenderableType:
        height = self._console.size.height
        rows = self._board.rows()
        room = max(1, height - CHROME - 3)  # leave at least 3 feed lines
        shown = rows[:room]
        table = tree_table(shown)
        if len(rows) > len(shown):
            table.add_row(Text(f"… {len(rows) - len(shown)} more", style="dim"))
        feed_lines = max(1, height - CHROME - len(shown) - (len(rows) > len(shown)))
        feed = list(self._feed)[-feed_lines:]
        header = Text.assemble(
            (f"{self._title} ", "bold"),
            (self._state, STATUS_STYLES.get(self._state, "")),
            (f" · seq {self._last_seq}" if self._last_seq else "", "dim"),
            (f" · {self._detail}" if self._detail and self._state != "live" else "", "dim"),
            no_wrap=True,
            overflow="ellipsis",
        )
        events = Group(*feed) if feed else Text("(no events yet)", style="dim")
        return Group(
            header,
            Panel(table, title="tree", title_align="left"),
            Panel(events, title="events", title_align="left", style="dim"),
        )


class PlainWatch:
    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._board = Board()

    def __enter__(self) -> PlainWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._out.flush()

    def _write(self, line: str) -> None:
        self._out.write(line + "\n")
        self._out.flush()

    def status(self, state: str, detail: str) -> None:
        self._write(f"» {state}: {detail}")

    def record(self, record: Record) -> None:
        self._board.apply(record)
        line = plain_line(record, self._board.name(record.session_id))
        if line is not None:
            self._write(line)

    def tick(self) -> None:
        pass
