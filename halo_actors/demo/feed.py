"""Print a workspace's events as they are logged: one plain line (or JSON) per event."""

from __future__ import annotations

import sys
from typing import TextIO

from ..core.errors import SubscriptionClosed
from ..core.events import Record, encode_record, kind_of
from ..core.log import EventLog

_SHOWN = {
    "user",
    "stream",
    "tool_call",
    "tool_result",
    "complete",
    "error",
    "report_sent",
    "stopped",
    "archived",
    "session_created",
    "message_queued",
}


def plain_line(record: Record) -> str | None:
    """A short human line for the kinds a newcomer cares about, else None."""
    kind = kind_of(record.event)
    if kind not in _SHOWN:
        return None
    detail = ""
    event = record.event
    for field in ("text", "error", "tool_name", "to_session_id", "agent_id"):
        value = getattr(event, field, None)
        if isinstance(value, str) and value:
            detail = value.replace("\n", " ⏎ ")[:100]
            break
    if kind == "tool_result":
        detail = f"{getattr(event, 'tool_name', '')} → {getattr(event, 'result', '')}"[:100]
        detail = detail.replace("\n", " ⏎ ")
    if kind == "complete" and getattr(event, "batch_boundary", False):
        detail = "(batch boundary)"
    return f"#{record.seq:<5} {record.session_id:<48} {kind:<15} {detail}"


async def print_feed(log: EventLog, *, as_json: bool = False, out: TextIO = sys.stdout) -> None:
    """Follow the whole log until cancelled."""
    try:
        async with log.subscribe() as subscription:
            async for record in subscription:
                if as_json:
                    out.write(encode_record(record).decode() + "\n")
                elif (line := plain_line(record)) is not None:
                    out.write(line + "\n")
                out.flush()
    except SubscriptionClosed:
        return
