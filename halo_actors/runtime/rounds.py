"""Pure rules for input rounds and reports up the tree (no I/O, no state).

- :func:`merge_round` folds drained mailbox messages into one round's text:
  messages from other sessions get a ``(from: session X)`` prefix, a person's go
  in raw.
- :func:`fitting` caps a round at the log's event size: the messages that do not fit
  one round record wait for the next round (a mailbox flooded with large messages
  must not turn into a record the log refuses, which would stall the session).
- :func:`report_recipient` decides who is owed the output of a turn: the parent,
  when the round came from the parent; nobody for a person's own chat, a
  sibling's message or a resume kick.
- :func:`final_report` reads only the run's last turn: its answer as ``done``, or
  its error as ``error`` (never an earlier turn's answer a second time).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..core.errors import EventTooLarge
from ..core.events import RoundKind, RoundStarted
from ..core.state import QueuedMessage

ROUND_OVERHEAD_BYTES = 1_024
"""What a round record takes besides its messages (kind, flags, seq, ids, framing)."""

RESUME_TEXT = "[resume] Continue the task you were working on before the interrupt."
INTERIM_HEADER = "[Interim report · status: still running]"
INTERIM_FOOTER = "Not the final result."
FINAL_HEADER = "[Final report · status: done]"


def final_header(status: str) -> str:
    """``[Final report · status: <status>]``: ``done``, or ``error`` for an errored last turn."""
    return f"[Final report · status: {status}]"


SIBLINGS_RUNNING = "Other sub-sessions of yours are still running: do not wrap up yet."


def round_text(message: QueuedMessage) -> str:
    """One message as a round shows it (a session's message says whose it is)."""
    source = message.source_session_id
    return f"(from: session {source}) {message.text}" if source else message.text


def merge_round(messages: Sequence[QueuedMessage]) -> str:
    return "\n\n".join(map(round_text, messages))


def round_started(taken: Sequence[QueuedMessage], kind: RoundKind, resumed: bool) -> RoundStarted:
    """The record of a round made of ``taken`` (at least one message; several merged)."""
    if len(taken) == 1:  # the usual round: one message, nothing to merge
        only = taken[0]
        return RoundStarted(
            text=round_text(only),
            images=only.images,
            drained=1,
            kind=kind,
            resumed_after_interrupt=resumed,
            from_session_ids=(only.source_session_id or "",),
        )
    return RoundStarted(
        text=merge_round(taken),
        images=tuple(i for m in taken for i in m.images),
        drained=len(taken),
        kind=kind,
        resumed_after_interrupt=resumed,
        from_session_ids=tuple(m.source_session_id or "" for m in taken),
    )


def message_bytes(message: QueuedMessage) -> int:
    """Bytes ``message`` adds to a round record (text with its prefix, images, source)."""
    encode = msgspec.json.encode
    return (
        len(encode(merge_round([message])))
        + sum(len(encode(image)) + 1 for image in message.images)
        + len(message.source_session_id or "")
        + 8
    )


def message_bytes_at_most(message: QueuedMessage) -> int:
    """An upper bound of :func:`message_bytes`, with no encoding: JSON spends at most six
    bytes on a character (``\\u001f``; UTF-8 at most four), plus quotes and separators."""
    source = len(message.source_session_id or "")
    text = len(message.text) + (source + 17 if source else 0)
    images = message.images
    pictures = 6 * sum(map(len, images)) + 3 * len(images) if images else 0
    return 6 * text + pictures + source + 10


def check_opens_round(message: QueuedMessage, cap: int) -> None:
    """Raise :class:`EventTooLarge` unless ``message`` alone fits one round record under
    ``cap`` bytes (a message that could not would stall its session: refused on arrival)."""
    if ROUND_OVERHEAD_BYTES + message_bytes_at_most(message) <= cap:  # else it surely fits
        return
    size = ROUND_OVERHEAD_BYTES + message_bytes(message)
    if size > cap:
        raise EventTooLarge(
            f"a message of about {size} bytes cannot open a round; the cap is {cap}"
        )


def fitting(messages: Sequence[QueuedMessage], cap: int) -> int:
    """How many leading ``messages`` one round record under ``cap`` bytes holds (at least
    one: ``deliver`` refuses a message that could not open a round on its own)."""
    if len(messages) == 1:  # the usual mailbox: one message, which fits (checked on arrival)
        return 1
    if ROUND_OVERHEAD_BYTES + sum(map(message_bytes_at_most, messages)) <= cap:
        return len(messages)  # all of them, surely: nothing to encode
    size = ROUND_OVERHEAD_BYTES
    for count, message in enumerate(messages):
        size += message_bytes(message)
        if size > cap:
            return max(count, 1)
    return len(messages)


def report_recipient(parent_id: str | None, round_sources: Sequence[str]) -> str | None:
    if parent_id is not None and parent_id in round_sources:
        return parent_id
    return None


def cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit} more characters not shown]"


def interim_report(output: str, limit: int) -> str:
    return f"{INTERIM_HEADER}\n{cap(output, limit)}\n\n{INTERIM_FOOTER}"


def final_report(output: str, limit: int, siblings_running: bool, error: str = "") -> str:
    """The report of a run's last turn: its answer (``done``), or its ``error``."""
    if error:
        body = f"{final_header('error')}\n{cap(error, limit)}"
    else:
        body = f"{FINAL_HEADER}\n{cap(output, limit) if output else '(no text output)'}"
    return f"{body}\n\n{SIBLINGS_RUNNING}" if siblings_running else body
