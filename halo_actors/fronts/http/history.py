"""``/api/web/history``: a session's person-facing history, projected from its log.

Rows, in log order (``id`` is the row's log seq, ``timestamp`` its server time, ms):

- ``{"role": "user", "text"}`` for each input round (``images`` when it had some)
  and for a mailbox a stop folded into the conversation, placed where the model's
  conversation has it: a fold logged while a turn or a compaction ran waits for its
  end (it lands after the cut turn's text), as ``SessionState`` parks it. Such a row
  takes the ``id`` and ``timestamp`` of the record it lands at (the turn's
  ``complete``, or the end of the compaction), so ids and timestamps still grow along
  the rows; folds landing together (a mailbox too big for one record) make one row;
- ``{"role": "assistant", "text", "contentBlocks": [...]}`` for each model
  response; blocks in order: ``{"type": "thinking", "text"}``, ``{"type": "text",
  "text"}``, ``{"type": "tool_use", "toolUseId", "toolName", "input", "output",
  "isError"}`` (``output`` is null until the result is logged; a result attaches to
  the block with its id, else to the first block still waiting);
- ``{"role": "error", "text"}`` for each error a turn raised.

An assistant row carries ``usage`` (``inputTokens``, ``outputTokens``,
``cacheReadTokens``, ``cacheWriteTokens``) once the response's ``usage`` record
follows it (every model response logs one; the scripted model's are zeros).

The text keeps ``MEDIA:`` lines as logged (readers strip them like the stream
does). Only the addressed session's own records count: sub-session rows never
appear. ``since`` keeps rows with ``timestamp >= since``, filtered before encoding.

Paging (:meth:`HistoryCache.page`): a page holds the newest rows (with ``id <
before`` when ``before`` is given), at most ``limit`` of them and no more encoded
bytes than ``max_bytes`` (one row at least), in log order; ``next_before`` is the
page's first id when older rows remain (the next page's ``before``), else None.
Rows are selected and encoded in a worker thread, holding the entry's lock so no
fold changes them meanwhile: a big history never encodes on the event loop.

:class:`HistoryCache` keeps one incremental fold per recently read session (LRU,
``capacity`` entries), reading only the records logged since its last read; a
per-entry lock keeps two concurrent readers from folding the same records twice.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass, field

import msgspec
import trio

from ...core.conversation import TextBlock, ThinkingBlock, ToolUseBlock
from ...core.events import (
    AgentStarted,
    AssistantReplied,
    ErrorRaised,
    FlagsChanged,
    MailboxFolded,
    Record,
    RoundStarted,
    SessionCreated,
    ToolReturned,
    TurnCompleted,
    UsageReported,
)
from ...core.log import EventFilter
from .remote import SessionReader

Row = dict[str, object]
HISTORY_KINDS = frozenset(
    {"session_created", "user", "assistant", "tool_result", "error", "mailbox_folded", "usage"}
    | {"agent_start", "complete", "flags"}  # where a parked fold lands
)


@dataclass
class HistoryFold:
    rows: list[Row] = field(default_factory=list)
    pending: list[dict[str, object]] = field(default_factory=list)
    """tool_use blocks still waiting for their result, in call order."""
    parked: list[str] = field(default_factory=list)
    """Fold texts waiting for the turn or compaction to end (the model sees them then)."""
    turn_open: bool = False
    compacting: bool = False

    def apply(self, record: Record) -> None:
        base: Row = {"id": record.seq, "timestamp": record.ts}
        match record.event:
            case SessionCreated():  # a deleted id created again: its history starts over
                self.rows, self.pending, self.parked = [], [], []
                self.turn_open = self.compacting = False
            case AgentStarted():
                self.turn_open = True
            case TurnCompleted():
                self.turn_open = False
                self._land(base)
            case FlagsChanged(is_compacting=compacting) if compacting is not None:
                self.compacting = compacting
                self._land(base)
            case RoundStarted(text=text, images=images):
                row = {**base, "role": "user", "text": text}
                self.rows.append(row | {"images": list(images)} if images else row)
            case MailboxFolded(text=text):
                self.parked.append(text)
                self._land(base)
            case AssistantReplied(content=content):
                blocks = [self._block(b) for b in content]
                text = "".join(b.text for b in content if isinstance(b, TextBlock))
                self.rows.append(
                    {**base, "role": "assistant", "text": text, "contentBlocks": blocks}
                )
            case ToolReturned() as e:
                self._result(e)
            case ErrorRaised(error=error):
                self.rows.append({**base, "role": "error", "text": error})
            case UsageReported() as e if self.rows and self.rows[-1]["role"] == "assistant":
                self.rows[-1]["usage"] = {
                    "inputTokens": e.input_tokens,
                    "outputTokens": e.output_tokens,
                    "cacheReadTokens": e.cache_read_tokens,
                    "cacheWriteTokens": e.cache_write_tokens,
                }
            case _:
                pass

    def _land(self, base: Row) -> None:
        if self.parked and not (self.turn_open or self.compacting):
            self.rows.append({**base, "role": "user", "text": "\n\n".join(self.parked)})
            self.parked = []

    def _block(self, block: object) -> dict[str, object]:
        if isinstance(block, ThinkingBlock):
            return {"type": "thinking", "text": block.text}
        if isinstance(block, ToolUseBlock):
            use: dict[str, object] = {"type": "tool_use", "toolUseId": block.id}
            use |= {"toolName": block.name, "input": block.input, "output": None}
            use["isError"] = False
            self.pending.append(use)
            return use
        if isinstance(block, TextBlock):
            return {"type": "text", "text": block.text}
        return {"type": "image"}

    def _result(self, e: ToolReturned) -> None:
        by_id = [u for u in self.pending if e.tool_use_id and u["toolUseId"] == e.tool_use_id]
        target = next(iter(by_id or self.pending), None)
        if target is None:
            return
        target["output"] = e.ui_result if e.ui_result is not None else e.result
        target["isError"] = e.is_error
        self.pending.remove(target)


@dataclass(frozen=True)
class HistoryPage:
    messages: bytes
    """The page's rows as one encoded JSON array."""
    next_before: int | None
    """The ``before`` of the next (older) page, or None on the oldest one."""


_encoder = msgspec.json.Encoder()


def _int(row: Row, key: str) -> int:
    value = row[key]
    assert isinstance(value, int)
    return value


def encode_page(
    rows: list[Row], since: int | None, before: int | None, limit: int, max_bytes: int
) -> HistoryPage:
    """Select and encode one page (see the module docstring); blocking, for a thread."""
    end = len(rows) if before is None else bisect_left(rows, before, key=lambda r: _int(r, "id"))
    picked: list[bytes] = []
    size, oldest, more = 0, None, False
    for row in reversed(rows[:end]):  # newest first; timestamps never decrease along the log
        if since is not None and _int(row, "timestamp") < since:
            break
        if len(picked) == limit:
            more = True
            break
        encoded = _encoder.encode(row)
        if picked and size + len(encoded) > max_bytes:
            more = True
            break
        picked.append(encoded)
        size += len(encoded) + 1
        oldest = _int(row, "id")
    body = b"[" + b",".join(reversed(picked)) + b"]"
    return HistoryPage(body, oldest if more else None)


@dataclass
class _Entry:
    fold: HistoryFold = field(default_factory=HistoryFold)
    cursor: int = 0
    created_ts: int = 0
    """Of the session this fold is about (a deleted and re-created id starts over)."""
    lock: trio.Lock = field(default_factory=trio.Lock)


class HistoryCache:
    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    async def page(
        self,
        sup: SessionReader,
        session_id: str,
        *,
        since: int | None,
        before: int | None,
        limit: int,
        max_bytes: int,
    ) -> HistoryPage:
        """One page of the session's rows (it must exist), folded up to its last durable record."""
        key = (str(sup.workspace.root), session_id)
        state = sup.state(session_id)
        entry = self._entries.get(key)
        if entry is None or entry.created_ts != state.created_ts:
            entry = self._entries[key] = _Entry(created_ts=state.created_ts)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        self._entries.move_to_end(key)
        # Bounded by the durable horizon, never by the state alone (it may run ahead of
        # the log): every record up to ``last`` is durable, none of it is skipped.
        async with entry.lock:
            last = min(sup.state(session_id).last_seq, sup.log.last_seq)
            if entry.cursor < last:
                flt = EventFilter(session_id=session_id, kinds=HISTORY_KINDS)
                for record in await sup.log.read(flt, after_seq=entry.cursor, until_seq=last):
                    entry.fold.apply(record)
                entry.cursor = last
            rows = entry.fold.rows
            return await trio.to_thread.run_sync(encode_page, rows, since, before, limit, max_bytes)
