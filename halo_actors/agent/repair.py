"""Conversation repair: a pure, idempotent function over the model-facing history.

Run after every interrupt, on reload after a crash and before retrying a request
the model API rejected as malformed:
1. empty text blocks are stripped (a message left empty is dropped);
2. every ``tool_use`` without a ``tool_result`` gets a synthesized one saying
   the call was cut short and must not be retried automatically — stripping the
   call instead would make the model believe it never ran, and run it again;
3. a second pass changes nothing.
"""

from __future__ import annotations

import operator

from ..core.conversation import (
    Block,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    message_chars,
)

INTERRUPTED_RESULT = (
    "[interrupted] This call was cut short before it finished; its effects may be "
    "partial. Do not retry it automatically: check the state first or ask the user."
)
NOT_RUN_RESULT = (
    "was not run — the turn was interrupted before this call started. "
    "Safe to re-issue if still needed."
)
STREAM_CUT_MARKER = (
    "[reply interrupted by the user here — the text above is what was shown before the cut]"
)
UI_INTERRUPTED = "[interrupted by user]"
UI_NOT_RUN = "[not run — interrupted]"


def repair(messages: list[Message]) -> list[Message]:
    """Return a valid conversation; ``repair(repair(m)) == repair(m)``."""
    stripped = [m for m in map(_strip_empty_text, messages) if m.content]
    out: list[Message] = []
    for index, message in enumerate(stripped):
        out.append(message)
        uses = message.tool_uses() if message.role == "assistant" else ()
        if not uses:
            continue
        following = stripped[index + 1] if index + 1 < len(stripped) else None
        answered = _answered_ids(following) if following and following.role == "user" else set()
        missing = [u for u in uses if u.id not in answered]
        if not missing:
            continue
        synthesized = tuple(_interrupted(u) for u in missing)
        if following is not None and following.role == "user" and answered:
            stripped[index + 1] = Message(role="user", content=(*following.content, *synthesized))
        else:
            out.append(Message(role="user", content=synthesized))
    return out


def _strip_empty_text(message: Message) -> Message:
    for block in message.content:
        if isinstance(block, TextBlock) and not block.text:
            break
    else:
        return message  # the usual case: nothing to strip, nothing built
    kept = tuple(b for b in message.content if not (isinstance(b, TextBlock) and not b.text))
    return Message(role=message.role, content=kept)


def _answered_ids(message: Message) -> set[str]:
    return {b.tool_use_id for b in message.content if isinstance(b, ToolResultBlock)}


def _interrupted(use: ToolUseBlock) -> Block:
    return ToolResultBlock(tool_use_id=use.id, content=INTERRUPTED_RESULT, is_error=True)


def unanswered(messages: list[Message]) -> list[ToolUseBlock]:
    """Tool calls that have no result anywhere in the conversation."""
    answered = {
        b.tool_use_id for m in messages for b in m.content if isinstance(b, ToolResultBlock)
    }
    return [u for m in messages for u in m.tool_uses() if u.id not in answered]


class RepairCache:
    """:func:`repair` of one growing conversation, re-checking only its new tail.

    Valid because ``repair`` works message by message and only looks ahead from an
    assistant message with tool calls to the message after it: a prefix that needed
    no repair and does not end on such a message stays valid while nothing in it
    changes. The caller says where the conversation was last edited in place.

    It also keeps the size of the last view (``message_chars`` summed) from the size of
    the conversation the caller keeps up to date: only a repaired tail is counted, so
    measuring a request is O(1) in the conversation's length, not a re-count of it.
    """

    __slots__ = ("_last", "_last_chars", "_valid")

    def __init__(self) -> None:
        self._valid = 0
        """Leading messages known to need no repair."""
        self._last: tuple[Message, ...] | None = None
        """The view :meth:`view` returned last (compared by identity)."""
        self._last_chars = 0
        """Its size: ``sum(map(message_chars, self._last))``."""

    def view(
        self, messages: list[Message], edited_from: int, chars: int | None = None
    ) -> tuple[Message, ...]:
        """``tuple(repair(messages))``; ``chars``, when given, is the size of ``messages``
        (``message_chars`` summed), from which :meth:`chars_of` answers for this view."""
        keep = min(self._valid, edited_from, len(messages))
        while keep and messages[keep - 1].role == "assistant" and messages[keep - 1].tool_uses():
            keep -= 1  # its results are in the tail: re-check the call with them
        tail = messages[keep:]
        fixed = repair(tail)
        if len(fixed) != len(tail) or not all(map(operator.is_, fixed, tail)):
            self._valid = keep
            view = (*messages[:keep], *fixed)
            if chars is not None:
                chars += sum(map(message_chars, fixed)) - sum(map(message_chars, tail))
        else:
            last = messages[-1] if messages else None
            open_calls = last is not None and last.role == "assistant" and bool(last.tool_uses())
            self._valid = len(messages) - 1 if open_calls else len(messages)
            view = tuple(messages)
        self._last, self._last_chars = (view, chars) if chars is not None else (None, 0)
        return view

    def chars_of(self, view: tuple[Message, ...]) -> int:
        """The size of ``view`` (``message_chars`` summed): O(1) for the last view made with
        its size known, counted otherwise."""
        if view is self._last:
            return self._last_chars
        return sum(map(message_chars, view))
