"""One short human line per event: what the demo's feed shows (plain and live views).

:func:`describe` picks the kinds a newcomer cares about and says each in a few
words; everything else (usage rows, per-chunk stream deltas, flag clears) is
``None`` and not shown. The full events are always available with ``--json``.
Pure functions: no I/O, no state.
"""

from __future__ import annotations

from ..core.conversation import TextBlock
from ..core.events import (
    AssistantReplied,
    Compacted,
    ErrorRaised,
    Event,
    FlagsChanged,
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
    Notified,
    Record,
    ReportSent,
    RoundStarted,
    SessionArchived,
    SessionCreated,
    SessionDeleted,
    SessionStopped,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
    kind_of,
)
from .board import describe_call

WIDTH = 110
"""Characters of detail shown per line."""


def one_line(text: str, width: int = WIDTH) -> str:
    flat = " ⏎ ".join(part for part in text.strip().splitlines() if part.strip())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _round(event: RoundStarted) -> str:
    kinds = {"opening": "opening round", "drained": "next round", "resume": "resume round"}
    label = f"merged round of {event.drained}" if event.drained > 1 else kinds[event.kind]
    if event.resumed_after_interrupt:
        label += ", after an interrupt"
    return f"[{label}] {event.text}"


def _flags(event: FlagsChanged) -> str | None:
    raised = [
        name
        for name, value in (
            ("interrupt requested", event.interrupt_requested),
            ("self-kick armed", event.self_kick),
            ("compacting", event.is_compacting),
        )
        if value
    ]
    return ", ".join(raised) or None


def _result(event: ToolReturned) -> str:
    shown = event.ui_result if event.ui_result is not None else event.result
    return f"{event.tool_name} → {shown}"


def _complete(event: TurnCompleted) -> str:
    mark = "batch boundary: another round follows" if event.batch_boundary else "terminal"
    return f"{event.stop_reason} ({mark})"


def _detail(event: Event) -> str | None:
    match event:
        case SessionCreated(agent_id=agent, parent_id=parent):
            return f"agent {agent}" + (" (sub-session)" if parent else " (root)")
        case MessageQueued(text=text, source_session_id=source):
            return f"{'from a session' if source else 'from the user'}: {text}"
        case RoundStarted():
            return _round(event)
        case AssistantReplied(content=blocks):
            text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
            return f"says: {text}" if text else None
        case ToolCalled(tool_name=name, tool_input=args):
            return describe_call(name, args)
        case ToolReturned():
            return _result(event)
        case TurnCompleted():
            return _complete(event)
        case FlagsChanged():
            return _flags(event)
        case MailboxFolded(count=count, text=text):
            return f"{count} queued message(s) folded into history: {text}"
        case MailboxDiscarded(count=count):
            return f"{count} queued message(s) discarded"
        case ReportSent(kind=kind):
            return f"{kind} report sent up the tree"
        case ErrorRaised(error=error):
            return error
        case Compacted(replaced=replaced):
            return f"{replaced} messages replaced by a summary"
        case Notified(text=text):
            return text
        case SessionStopped() | SessionArchived() | SessionDeleted():
            return ""
        case _:
            return None


def describe(record: Record) -> str | None:
    """The detail of a shown event (possibly empty), or None for a hidden one."""
    return _detail(record.event)


def plain_line(record: Record, name: str) -> str | None:
    """``#seq  session  kind  detail`` for a shown event, else None."""
    detail = describe(record)
    if detail is None:
        return None
    kind = kind_of(record.event)
    return f"#{record.seq:<4} {name:<20} {kind:<17} {one_line(detail)}".rstrip()
