"""Every event kind, as one msgspec tagged union, and the one codec.

Three families share the union (the ``type`` tag tells them apart on the wire):

- **client kinds**, what streams show a person: ``user``, ``thinking``,
  ``stream``, ``tool_call``, ``tool_result``, ``error``, ``complete``; plus the
  frame-only kinds a front builds around a stream and never stores: ``session``,
  ``queued``, ``switch``, ``file``;
- **system rows** history consumers skip: ``agent_start``, ``agent_done``,
  ``usage``, ``context``, ``notification``;
- **internal facts** a session's state is rebuilt from: ``session_created``,
  ``message_queued``, ``assistant``, ``flags``, ``mailbox_folded``,
  ``mailbox_discarded``, ``compacted``, ``report_sent``, ``command_started``,
  ``stopped``, ``archived``, ``deleted``.

Schema evolution: new fields get defaults; tags never change. Field names are
camelCase on the wire. A stored event is wrapped in a :class:`Record` carrying
the global sequence number, the session id and the server timestamp (ms).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal

import msgspec

from .access import Access
from .conversation import Block


class _Event(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="type",
    rename="camel",
    omit_defaults=True,
    gc=False,
):
    """Base of every event kind. Events are plain data (no reference cycles), so the
    garbage collector need not track them (``gc=False``): a big log costs it nothing."""


# --- frame-only client kinds (built by fronts, never stored) -------------------


class SessionFrame(_Event, frozen=True, tag="session"):
    """Opens every stream: the session the stream is about."""

    session_id: str


class QueuedFrame(_Event, frozen=True, tag="queued"):
    """The sender's message was queued behind a running turn."""


class SwitchFrame(_Event, frozen=True, tag="switch"):
    """The account's active session moved to ``session_id``."""

    session_id: str


class FileFrame(_Event, frozen=True, tag="file"):
    """A ``MEDIA: <path>`` line of the reply, offered as a file."""

    path: str
    url: str


# --- stored client kinds ------------------------------------------------------

RoundKind = Literal["opening", "drained", "resume"]


class RoundStarted(_Event, frozen=True, tag="user"):
    """A turn's input round: the opening message, a merged drain, or a resume kick.

    ``drained`` messages were taken off the head of the mailbox (one splice).
    """

    text: str
    images: tuple[str, ...] = ()
    drained: int = 0
    kind: RoundKind = "opening"
    resumed_after_interrupt: bool = False
    from_session_ids: tuple[str, ...] = ()
    """Sources of the drained messages (empty string for a person's own)."""


class ThinkingStreamed(_Event, frozen=True, tag="thinking"):
    text: str


class TextStreamed(_Event, frozen=True, tag="stream"):
    text: str


class ToolCalled(_Event, frozen=True, tag="tool_call"):
    tool_name: str
    tool_use_id: str
    tool_input: dict[str, object] = msgspec.field(default_factory=dict)


class ToolReturned(_Event, frozen=True, tag="tool_result"):
    """A tool call's result; it is both a stream frame and a conversation fact.

    ``ui_result`` is what a person sees when it differs from what the model sees
    (for example ``[interrupted by user]`` for a call cut by a hard abort).
    """

    tool_name: str
    tool_use_id: str
    result: str
    is_error: bool = False
    ui_result: str | None = None


class ErrorRaised(_Event, frozen=True, tag="error"):
    error: str


class TurnCompleted(_Event, frozen=True, tag="complete"):
    """A turn ended. Marked ``batch_boundary`` when the next round is already queued;
    the unmarked one is terminal for its run."""

    batch_boundary: bool = False
    stop_reason: str = "end_turn"


# --- system rows -------------------------------------------------------------


class AgentStarted(_Event, frozen=True, tag="agent_start"):
    """A turn began (paired with a later ``complete``)."""


class AgentDone(_Event, frozen=True, tag="agent_done"):
    """A run ended: mailbox empty, no kick pending."""


class UsageReported(_Event, frozen=True, tag="usage"):
    """Tokens one model response cost (the prompt's cached part counted apart)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class ContextMeasured(_Event, frozen=True, tag="context"):
    """The conversation's size in tokens against the context window (``max_tokens``):
    from the model's usage when it reports one, else the runtime's estimate."""

    tokens: int
    max_tokens: int
    estimated: bool = False


class Notified(_Event, frozen=True, tag="notification"):
    text: str


# --- internal facts ----------------------------------------------------------


class SessionCreated(_Event, frozen=True, tag="session_created"):
    agent_id: str
    parent_id: str | None = None
    title: str | None = None
    description: str | None = None
    access: Access | None = None
    """The creator's access level, fixed for the session's life (``core/access.py``).
    None: written before levels were recorded; the runtime's default applies."""


class MessageQueued(_Event, frozen=True, tag="message_queued"):
    """An inbound message, written before it is acted on."""

    text: str
    images: tuple[str, ...] = ()
    source_session_id: str | None = None
    inbox_id: int | None = None
    """The shared inbox row it came through, when another node received it (a new
    owner delivering rows left unsettled skips those already logged)."""


class AssistantReplied(_Event, frozen=True, tag="assistant"):
    """One model response, as the conversation keeps it."""

    content: tuple[Block, ...]
    stop_reason: str = "end_turn"


class FlagsChanged(_Event, frozen=True, tag="flags"):
    """Flags set or cleared; ``None`` leaves a flag unchanged."""

    interrupt_requested: bool | None = None
    self_kick: bool | None = None
    is_compacting: bool | None = None


class MailboxFolded(_Event, frozen=True, tag="mailbox_folded"):
    """Stop preserved the mailbox: its ``count`` messages became one user turn."""

    text: str
    count: int


class MailboxDiscarded(_Event, frozen=True, tag="mailbox_discarded"):
    count: int


class Compacted(_Event, frozen=True, tag="compacted"):
    """The first ``replaced`` conversation messages became one summary."""

    summary: str
    replaced: int


class ReportSent(_Event, frozen=True, tag="report_sent"):
    to_session_id: str
    kind: Literal["final", "interim"]


class CommandStarted(_Event, frozen=True, tag="command_started"):
    """A shell command started as process group ``pgid`` (its leader's pid).

    ``started`` (the leader's start time, clock ticks since boot, from
    ``/proc/<pid>/stat``) and ``boot_id`` name that one process for ever: a restart
    after a crash kills the group only if its leader still has them (a pid alone may
    have been reused). ``started`` is 0 where no process table could be read.
    """

    pgid: int
    started: int = 0
    boot_id: str = ""


class SessionStopped(_Event, frozen=True, tag="stopped"):
    pass


class SessionArchived(_Event, frozen=True, tag="archived"):
    pass


class SessionDeleted(_Event, frozen=True, tag="deleted"):
    pass


Event = (
    SessionFrame
    | QueuedFrame
    | SwitchFrame
    | FileFrame
    | RoundStarted
    | ThinkingStreamed
    | TextStreamed
    | ToolCalled
    | ToolReturned
    | ErrorRaised
    | TurnCompleted
    | AgentStarted
    | AgentDone
    | UsageReported
    | ContextMeasured
    | Notified
    | SessionCreated
    | MessageQueued
    | AssistantReplied
    | FlagsChanged
    | MailboxFolded
    | MailboxDiscarded
    | Compacted
    | ReportSent
    | CommandStarted
    | SessionStopped
    | SessionArchived
    | SessionDeleted
)

FRAME_ONLY_TYPES: Final[frozenset[type[_Event]]] = frozenset(
    {SessionFrame, QueuedFrame, SwitchFrame, FileFrame}
)
"""Frames the fronts send and the log refuses to store (checked by exact type)."""
FRAME_ONLY_KINDS: Final = frozenset(t.__struct_config__.tag for t in FRAME_ONLY_TYPES)
SYSTEM_KINDS: Final = frozenset({"agent_start", "agent_done", "usage", "context", "notification"})
CLIENT_KINDS: Final = frozenset(
    {"user", "thinking", "stream", "tool_call", "tool_result", "error", "complete"}
)


def kind_of(event: Event) -> str:
    """The wire tag of an event (``"stream"``, ``"tool_call"``, …)."""
    return event.__struct_config__.tag  # type: ignore[return-value]


class Record(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """A stored event: global sequence number, session, server time (ms), payload."""

    seq: int
    session_id: str
    ts: int
    event: Event


_encoder: Final = msgspec.json.Encoder()
_event_decoder: Final = msgspec.json.Decoder(Event)
_record_decoder: Final = msgspec.json.Decoder(Record)
_records_decoder: Final = msgspec.json.Decoder(list[Record])


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> Event:
    return _event_decoder.decode(data)


encode_record: Final[Callable[[Record], bytes]] = _encoder.encode
"""The encoder's own method: no Python frame per record (every append encodes)."""


def decode_record(data: bytes | str) -> Record:
    return _record_decoder.decode(data)


decode_records: Final[Callable[[bytes | str], list[Record]]] = _records_decoder.decode
"""A JSON array of records (a stored batch: ``core/log/sqlite.py``)."""
