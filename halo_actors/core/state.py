"""Folds: a session's whole state rebuilt from its events.

``SessionState.apply`` is the only code that changes a session's state; the live
actor applies every record it appends, and a restart replays the log through
the same method, so live and replayed state agree by construction.

Invariants:
- the mailbox is FIFO; ``RoundStarted.drained`` removes that many from its head;
- a ``MailboxFolded`` that arrives while a turn is open or a compaction runs is
  parked and lands, in order, when the turn completes or the compaction ends, so
  a fold never splits a tool call from its result;
- text a hard cut landed (``stop_reason`` ``interrupted``) joins the conversation and
  the UI log, never a turn's output: output and reports carry answers only;
- a tool result goes to the conversation next to the call it answers, and to
  the UI entry with its id, else to the first entry still waiting for output;
- a ``SessionCreated`` for a session already created (a deleted id, created again)
  starts the state over: nothing of the earlier life carries into the new one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .access import Access
from .conversation import (
    CHARS_PER_TOKEN,
    Block,
    Message,
    TextBlock,
    ToolResultBlock,
    block_chars,
    message_chars,
    user_text,
)
from .events import (
    AgentStarted,
    AssistantReplied,
    CommandStarted,
    Compacted,
    ContextMeasured,
    ErrorRaised,
    FlagsChanged,
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
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
)

Lifecycle = Literal["live", "stopped", "archived", "deleted"]

LANDED = "interrupted"
"""``AssistantReplied.stop_reason`` of the text a hard cut landed (no model stops so)."""


TITLE_CHARS = 60


def title_from(text: str) -> str | None:
    """A session title from a message: its first non-empty line, whitespace collapsed,
    at most ``TITLE_CHARS`` characters (cut with ``…``); None for a blank message."""
    line = next((" ".join(part.split()) for part in text.splitlines() if part.strip()), "")
    if not line:
        return None
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


@dataclass(slots=True)
class QueuedMessage:
    text: str
    images: tuple[str, ...] = ()
    source_session_id: str | None = None


@dataclass(slots=True)
class UiEntry:
    """One row of the person-facing log."""

    kind: Literal["user", "assistant", "tool", "error", "notice"]
    text: str = ""
    seq: int = 0
    ts: int = 0
    tool_name: str = ""
    tool_use_id: str = ""
    tool_input: dict[str, object] | None = None
    output: str | None = None
    """For tool rows: None while the call is pending."""


@dataclass(slots=True)
class SessionState:
    session_id: str
    agent_id: str = "default"
    parent_id: str | None = None
    title: str | None = None
    description: str | None = None
    access: Access | None = None
    """As recorded at creation; None for a session logged before levels were."""
    created_ts: int = 0
    updated_ts: int = 0
    last_seq: int = 0
    lifecycle: Lifecycle = "live"
    _messages: list[Message] = field(default_factory=list)
    """The conversation; read it as :attr:`messages` (the last one may be unsettled)."""
    mailbox: list[QueuedMessage] = field(default_factory=list)
    ui: list[UiEntry] = field(default_factory=list)
    interrupt_requested: bool = False
    self_kick: bool = False
    is_compacting: bool = False
    resumed_after_interrupt: bool = False
    turn_open: bool = False
    round_sources: tuple[str, ...] = ()
    turn_output: str = ""
    """Assistant text of the current (or last) turn; text a hard cut landed is not in it."""
    turn_error: str = ""
    """The last error the current (or last) turn raised; empty while it raised none."""
    last_output: str = ""
    """Assistant text of the last completed turn that answered (text, no error)."""
    last_turn_output: str = ""
    """What the last completed turn answered: its text, or empty (none, or it errored)."""
    last_turn_error: str = ""
    """The error that ended the last completed turn (or a run with no turn open)."""
    parked_folds: tuple[str, ...] = ()
    """Folds waiting for the turn or compaction to end (a tuple: usually empty, shared)."""
    final_reports: int = 0
    commands: tuple[CommandStarted, ...] = ()
    """Shell commands started in the open turn (recovery kills those a crash left)."""
    context_chars: int = 0
    """Size of ``messages`` in a model request, kept up to date by :meth:`apply`."""
    measured_tokens: int | None = None
    """The context size the model last reported (None: never, or not since a compaction)."""
    measured_chars: int = 0
    """``context_chars`` when ``measured_tokens`` was reported."""
    first_edit: int | None = field(default=None, compare=False)
    """Lowest index of ``messages`` changed in place since a reader last took it."""
    _pending_tools: dict[str, UiEntry] | None = None
    """UI tool rows still waiting for output, by call id, oldest first (made on first use)."""
    _results: list[Block] | None = field(default=None, compare=False)
    """The blocks of the last message while it holds tool results only: a batch's results
    join it here, and the message is rebuilt from them when next read (``_unsettled``)."""
    _unsettled: bool = field(default=False, compare=False)

    @property
    def messages(self) -> list[Message]:
        """The conversation, as a model sees it before repair (read-only for callers)."""
        if self._unsettled:
            self._unsettled = False
            self._messages[-1] = Message(role="user", content=tuple(self._results or ()))
        return self._messages

    def __eq__(self, other: object) -> bool:
        """Field by field (``first_edit`` aside), the conversation as read."""
        if type(other) is not SessionState:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _COMPARED)

    def apply(self, record: Record) -> None:
        event = record.event
        if self.created_ts and type(event) is SessionCreated:
            self._start_over()  # the id of a deleted session, created again
        self.last_seq = record.seq
        self.updated_ts = record.ts
        handler = _APPLY.get(type(event))  # absent: it changes nothing else (streamed text, …)
        if handler is not None:
            handler(self, event, record)

    # --- one handler per event type that changes more than seq and time (``_APPLY``) ---

    def _created(self, e: SessionCreated, record: Record) -> None:
        self.agent_id, self.parent_id = e.agent_id, e.parent_id
        self.title, self.description = e.title, e.description
        self.access = e.access
        self.created_ts = record.ts

    def _queued(self, e: MessageQueued, record: Record) -> None:
        self.mailbox.append(QueuedMessage(e.text, e.images, e.source_session_id))
        if self.title is None:  # a session without a title is named by its first message
            self.title = title_from(e.text)
        if self.lifecycle == "stopped":
            self.lifecycle = "live"

    def _agent_started(self, e: AgentStarted, record: Record) -> None:
        self.turn_open = True

    def _tool_called(self, e: ToolCalled, record: Record) -> None:
        row = UiEntry(
            "tool",
            seq=record.seq,
            ts=record.ts,
            tool_name=e.tool_name,
            tool_use_id=e.tool_use_id,
            tool_input=e.tool_input,
        )
        self.ui.append(row)
        if self._pending_tools is None:
            self._pending_tools = {}
        key = e.tool_use_id
        if not key or key in self._pending_tools:  # no id, or a repeated one
            key = f"\0{record.seq}"
        self._pending_tools[key] = row

    def _error(self, e: ErrorRaised, record: Record) -> None:
        self.turn_error = e.error
        if not self.turn_open:  # a run that ended early with no turn open
            self.last_turn_output, self.last_turn_error = "", e.error
        self.ui.append(UiEntry("error", e.error, record.seq, record.ts))

    def _folded(self, e: MailboxFolded, record: Record) -> None:
        del self.mailbox[: e.count]
        self.parked_folds = (*self.parked_folds, e.text)
        self._land_folds()

    def _discarded(self, e: MailboxDiscarded, record: Record) -> None:
        del self.mailbox[: e.count]

    def _compacted(self, e: Compacted, record: Record) -> None:
        summary = user_text(f"[summary of the earlier conversation]\n{e.summary}")
        self.messages[: e.replaced] = [summary]
        self._results = None
        self.first_edit = 0
        self.context_chars = sum(map(message_chars, self.messages))
        self.measured_tokens = None

    def _measured(self, e: ContextMeasured, record: Record) -> None:
        if not e.estimated:
            self.measured_tokens, self.measured_chars = e.tokens, self.context_chars

    def _command(self, e: CommandStarted, record: Record) -> None:
        self.commands = (*self.commands, e)

    def _reported(self, e: ReportSent, record: Record) -> None:
        if e.kind == "final":
            self.final_reports += 1

    def _stopped(self, e: SessionStopped, record: Record) -> None:
        self.lifecycle = "stopped"

    def _archived(self, e: SessionArchived, record: Record) -> None:
        self.lifecycle = "archived"
        self.mailbox.clear()

    def _deleted(self, e: SessionDeleted, record: Record) -> None:
        self.lifecycle = "deleted"

    @property
    def status(self) -> str:
        """``running`` while a turn is open, else the lifecycle (``live`` shows as ``idle``)."""
        if self.turn_open:
            return "running"
        return "idle" if self.lifecycle == "live" else self.lifecycle

    def _start_over(self) -> None:
        """A new life: nothing of the deleted session before it carries over."""
        fresh = SessionState(self.session_id)
        for name in _FIELDS:
            setattr(self, name, getattr(fresh, name))

    def _round(self, e: RoundStarted, record: Record) -> None:
        del self.mailbox[: e.drained]
        self._add_message(user_text(e.text, e.images))
        self.ui.append(UiEntry("user", e.text, record.seq, record.ts))
        self.resumed_after_interrupt = e.resumed_after_interrupt
        self.round_sources = e.from_session_ids
        self.turn_output = ""
        self.turn_error = ""
        self.lifecycle = "live" if self.lifecycle == "stopped" else self.lifecycle

    def _assistant(self, e: AssistantReplied, record: Record) -> None:
        self._add_message(Message(role="assistant", content=e.content))
        text = "".join(b.text for b in e.content if isinstance(b, TextBlock))
        if text:
            if e.stop_reason != LANDED:  # a cut turn's streamed text is no answer
                self.turn_output += text
            self.ui.append(UiEntry("assistant", text, record.seq, record.ts))

    def _tool_result(self, e: ToolReturned, record: Record) -> None:
        block = ToolResultBlock(tool_use_id=e.tool_use_id, content=e.result, is_error=e.is_error)
        results = self._results
        if results is None:
            messages = self.messages
            last = messages[-1] if messages else None
            if last is not None and last.role == "user" and _only_results(last):
                results = self._results = list(last.content)
        if results is not None:  # the last message grows: rebuilt once, when next read
            results.append(block)
            self._unsettled = True
            self.context_chars += block_chars(block)
            edited = len(self._messages) - 1
            self.first_edit = edited if self.first_edit is None else min(self.first_edit, edited)
        else:
            self._add_message(Message(role="user", content=(block,)))
            self._results = [block]
        shown = e.ui_result if e.ui_result is not None else e.result
        pending = self._pending_tools or {}
        key = e.tool_use_id if e.tool_use_id in pending else next(iter(pending), None)
        if key is not None:
            pending.pop(key).output = shown

    def _add_message(self, message: Message) -> None:
        self.messages.append(message)  # (settles the last one first)
        self._results = None
        self.context_chars += message_chars(message)

    @property
    def estimated_tokens(self) -> int:
        """The model-request size of the conversation, as ``estimate_tokens`` counts it."""
        return self.context_chars // CHARS_PER_TOKEN

    @property
    def context_tokens(self) -> int:
        """The conversation's size in tokens: the model's last count plus the estimate of
        what was added since, or the estimate alone when the model never counted."""
        if self.measured_tokens is None:
            return self.estimated_tokens
        grown = max(0, self.context_chars - self.measured_chars) // CHARS_PER_TOKEN
        return self.measured_tokens + grown

    @property
    def turn_errored(self) -> bool:
        return bool(self.turn_error)

    def _complete_turn(self, e: TurnCompleted, record: Record) -> None:
        self.turn_open = False
        self.commands = ()  # a turn ends only once its commands have (or were killed)
        answer = "" if self.turn_error else self.turn_output
        self.last_turn_output, self.last_turn_error = answer, self.turn_error
        if answer:
            self.last_output = answer
        self._land_folds()

    def _flags(self, e: FlagsChanged, record: Record) -> None:
        if e.interrupt_requested is not None:
            self.interrupt_requested = e.interrupt_requested
        if e.self_kick is not None:
            self.self_kick = e.self_kick
        if e.is_compacting is not None:
            self.is_compacting = e.is_compacting
            self._land_folds()

    def _land_folds(self) -> None:
        if self.turn_open or self.is_compacting:
            return
        for text in self.parked_folds:
            self._add_message(user_text(text))
            self.ui.append(UiEntry("user", text))
        self.parked_folds = ()


_APPLY: dict[type, Callable[[SessionState, Any, Record], None]] = {
    SessionCreated: SessionState._created,
    MessageQueued: SessionState._queued,
    RoundStarted: SessionState._round,
    AgentStarted: SessionState._agent_started,
    AssistantReplied: SessionState._assistant,
    ToolCalled: SessionState._tool_called,
    ToolReturned: SessionState._tool_result,
    ErrorRaised: SessionState._error,
    TurnCompleted: SessionState._complete_turn,
    FlagsChanged: SessionState._flags,
    MailboxFolded: SessionState._folded,
    MailboxDiscarded: SessionState._discarded,
    Compacted: SessionState._compacted,
    ContextMeasured: SessionState._measured,
    CommandStarted: SessionState._command,
    ReportSent: SessionState._reported,
    SessionStopped: SessionState._stopped,
    SessionArchived: SessionState._archived,
    SessionDeleted: SessionState._deleted,
}
"""What each event type changes besides ``last_seq`` and ``updated_ts`` (a lookup by
exact type: events are never subclassed). A type absent here changes nothing else:
streamed text and thinking, usage, ``agent_done``, notices."""


_FIELDS = tuple(f.name for f in fields(SessionState) if f.name not in ("session_id",))
_COMPARED = tuple(
    "messages" if f.name == "_messages" else f.name for f in fields(SessionState) if f.compare
)


def _only_results(message: Message) -> bool:
    """A user message holds tool results only, or none (``user_text`` never mixes them),
    so its first block decides; a batch's results join one message without a rescan."""
    return bool(message.content) and isinstance(message.content[0], ToolResultBlock)


def replay(session_id: str, records: list[Record]) -> SessionState:
    """Rebuild one session's state from its records (in seq order)."""
    state = SessionState(session_id)
    for record in records:
        state.apply(record)
    return state
