"""The event union and its one codec: round-trips, wire names, tags.

Coverage is driven by ``typing.get_args(Event)``: a new kind fails
``test_every_event_kind_has_a_sample`` until it gets a hand-written sample, and the
generated round-trip builds every kind from its msgspec field types (a field of a
type the builder does not know fails loudly rather than being skipped).
"""

from __future__ import annotations

import json
import re
import types
import typing
from typing import Literal, Union, get_args, get_origin

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_actors.core.conversation import (
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from halo_actors.core.events import (
    CLIENT_KINDS,
    FRAME_ONLY_KINDS,
    SYSTEM_KINDS,
    AgentDone,
    AgentStarted,
    AssistantReplied,
    CommandStarted,
    Compacted,
    ContextMeasured,
    ErrorRaised,
    Event,
    FileFrame,
    FlagsChanged,
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
    Notified,
    QueuedFrame,
    Record,
    ReportSent,
    RoundStarted,
    SessionArchived,
    SessionCreated,
    SessionDeleted,
    SessionFrame,
    SessionStopped,
    SwitchFrame,
    TextStreamed,
    ThinkingStreamed,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
    UsageReported,
    decode_event,
    decode_record,
    encode_event,
    encode_record,
    kind_of,
)

EVENT_KINDS: tuple[type[msgspec.Struct], ...] = get_args(Event)

# --- hand-written samples: every kind, every non-default field set ---------------------

SAMPLES: dict[type[msgspec.Struct], list[Event]] = {
    SessionFrame: [SessionFrame(session_id="web_a>child")],
    QueuedFrame: [QueuedFrame()],
    SwitchFrame: [SwitchFrame(session_id="cli_x")],
    FileFrame: [FileFrame(path="out/plot.png", url="/files/out/plot.png")],
    RoundStarted: [
        RoundStarted(text="hi"),
        RoundStarted(
            text="merged\n\nsecond",
            images=("data:image/png;base64,AA==",),
            drained=2,
            kind="drained",
            resumed_after_interrupt=True,
            from_session_ids=("", "web_a>child"),
        ),
    ],
    ThinkingStreamed: [ThinkingStreamed(text="hmm…")],
    TextStreamed: [TextStreamed(text="Hel"), TextStreamed(text="")],
    ToolCalled: [
        ToolCalled(tool_name="shell", tool_use_id="tu_1"),
        ToolCalled(
            tool_name="edit",
            tool_use_id="tu_2",
            tool_input={"path": "a.py", "n": 3, "opts": [True, None, 1.5], "nested": {"k": "v"}},
        ),
    ],
    ToolReturned: [
        ToolReturned(tool_name="shell", tool_use_id="tu_1", result="ok"),
        ToolReturned(
            tool_name="shell",
            tool_use_id="tu_1",
            result="",
            is_error=True,
            ui_result="[interrupted by user]",
        ),
    ],
    ErrorRaised: [ErrorRaised(error="model unavailable")],
    TurnCompleted: [
        TurnCompleted(),
        TurnCompleted(batch_boundary=True),
        TurnCompleted(stop_reason="max_tokens"),
    ],
    AgentStarted: [AgentStarted()],
    AgentDone: [AgentDone()],
    UsageReported: [UsageReported(), UsageReported(input_tokens=120, output_tokens=7)],
    ContextMeasured: [ContextMeasured(tokens=1_000, max_tokens=200_000)],
    Notified: [Notified(text="child finished")],
    SessionCreated: [
        SessionCreated(agent_id="coder"),
        SessionCreated(agent_id="coder", parent_id="web_a", title="T", description="D"),
    ],
    MessageQueued: [
        MessageQueued(text="hello"),
        MessageQueued(text="report", images=("u",), source_session_id="web_a>c"),
    ],
    AssistantReplied: [
        AssistantReplied(content=()),
        AssistantReplied(
            content=(
                ThinkingBlock(text="plan"),
                TextBlock(text="Let me look."),
                ImageBlock(data="https://x/y.png", media_type="image/jpeg"),
                ToolUseBlock(id="tu_1", name="shell", input={"cmd": "ls -la"}),
                ToolResultBlock(tool_use_id="tu_0", content="done", is_error=True),
            ),
            stop_reason="tool_use",
        ),
    ],
    FlagsChanged: [
        FlagsChanged(),
        FlagsChanged(interrupt_requested=True, self_kick=False, is_compacting=True),
    ],
    MailboxFolded: [MailboxFolded(text="a\n\nb", count=2)],
    MailboxDiscarded: [MailboxDiscarded(count=3)],
    Compacted: [Compacted(summary="so far…", replaced=12)],
    ReportSent: [
        ReportSent(to_session_id="web_a", kind="final"),
        ReportSent(to_session_id="web_a", kind="interim"),
    ],
    CommandStarted: [
        CommandStarted(pgid=4242),
        CommandStarted(pgid=4242, started=123_456, boot_id="0b7e-boot"),
    ],
    SessionStopped: [SessionStopped()],
    SessionArchived: [SessionArchived()],
    SessionDeleted: [SessionDeleted()],
}

ALL_SAMPLES: list[Event] = [event for samples in SAMPLES.values() for event in samples]

PINNED_TAGS = {
    "session": SessionFrame,
    "queued": QueuedFrame,
    "switch": SwitchFrame,
    "file": FileFrame,
    "user": RoundStarted,
    "thinking": ThinkingStreamed,
    "stream": TextStreamed,
    "tool_call": ToolCalled,
    "tool_result": ToolReturned,
    "error": ErrorRaised,
    "complete": TurnCompleted,
    "agent_start": AgentStarted,
    "agent_done": AgentDone,
    "usage": UsageReported,
    "context": ContextMeasured,
    "notification": Notified,
    "session_created": SessionCreated,
    "message_queued": MessageQueued,
    "assistant": AssistantReplied,
    "flags": FlagsChanged,
    "mailbox_folded": MailboxFolded,
    "mailbox_discarded": MailboxDiscarded,
    "compacted": Compacted,
    "report_sent": ReportSent,
    "command_started": CommandStarted,
    "stopped": SessionStopped,
    "archived": SessionArchived,
    "deleted": SessionDeleted,
}
"""Tags never change (schema evolution): a stored log must decode forever."""


def _tag(cls: type[msgspec.Struct]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def test_every_event_kind_has_a_sample() -> None:
    missing = [cls.__name__ for cls in EVENT_KINDS if cls not in SAMPLES]
    assert not missing, f"add samples for {missing} to SAMPLES"
    assert set(SAMPLES) == set(EVENT_KINDS)
    for cls, samples in SAMPLES.items():
        assert samples and all(type(s) is cls for s in samples)


def test_tags_are_pinned_and_unique() -> None:
    tags = {_tag(cls): cls for cls in EVENT_KINDS}
    assert len(tags) == len(EVENT_KINDS)
    for tag, cls in PINNED_TAGS.items():
        assert tags.get(tag) is cls, f"tag {tag!r} must keep meaning {cls.__name__}"


def test_kind_families_are_disjoint_and_known() -> None:
    tags = {_tag(cls) for cls in EVENT_KINDS}
    assert tags >= FRAME_ONLY_KINDS | SYSTEM_KINDS | CLIENT_KINDS
    assert not FRAME_ONLY_KINDS & SYSTEM_KINDS
    assert not FRAME_ONLY_KINDS & CLIENT_KINDS
    assert not SYSTEM_KINDS & CLIENT_KINDS


@pytest.mark.parametrize("event", ALL_SAMPLES, ids=lambda e: kind_of(e))
def test_every_sample_round_trips(event: Event) -> None:
    wire = encode_event(event)
    assert decode_event(wire) == event
    assert decode_event(wire.decode()) == event
    assert json.loads(wire)["type"] == kind_of(event)


@pytest.mark.parametrize("event", ALL_SAMPLES, ids=lambda e: kind_of(e))
def test_every_sample_round_trips_inside_a_record(event: Event) -> None:
    record = Record(seq=7, session_id="web_a>b", ts=1_700_000_000_123, event=event)
    wire = encode_record(record)
    assert decode_record(wire) == record
    assert set(json.loads(wire)) == {"seq", "sessionId", "ts", "event"}


# --- wire names ----------------------------------------------------------------------------


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@pytest.mark.parametrize("cls", EVENT_KINDS, ids=lambda c: c.__name__)
def test_field_names_are_camel_case_on_the_wire(cls: type[msgspec.Struct]) -> None:
    for info in msgspec.structs.fields(cls):
        assert info.encode_name == _camel(info.name)
    for sample in SAMPLES[cls]:
        for key in json.loads(encode_event(sample)):
            assert re.fullmatch(r"[a-z][A-Za-z0-9]*", key), key


def test_tool_events_use_tool_use_id_on_the_wire() -> None:
    call = json.loads(encode_event(ToolCalled(tool_name="t", tool_use_id="u", tool_input={"a": 1})))
    assert call == {"type": "tool_call", "toolName": "t", "toolUseId": "u", "toolInput": {"a": 1}}
    result = json.loads(encode_event(ToolReturned(tool_name="t", tool_use_id="u", result="r")))
    assert result == {"type": "tool_result", "toolName": "t", "toolUseId": "u", "result": "r"}


def test_a_plain_complete_is_just_its_tag() -> None:
    assert encode_event(TurnCompleted()) == b'{"type":"complete"}'


def test_a_batch_boundary_complete_says_so_in_camel_case() -> None:
    wire = json.loads(encode_event(TurnCompleted(batch_boundary=True)))
    assert wire == {"type": "complete", "batchBoundary": True}
    assert decode_event(b'{"type":"complete","batchBoundary":true}') == TurnCompleted(
        batch_boundary=True
    )


def test_missing_optional_fields_decode_to_their_defaults() -> None:
    assert decode_event(b'{"type":"user","text":"x"}') == RoundStarted(text="x")
    assert decode_event(b'{"type":"complete"}') == TurnCompleted()


# --- refusals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wire",
    [
        b'{"type":"no_such_kind"}',
        b'{"type":"Stream","text":"x"}',  # tags are case-sensitive
        b'{"text":"x"}',  # no tag at all
        b'{"type":"stream"}',  # a required field missing
        b'{"type":"stream","text":1}',  # a field of the wrong type
        b'{"type":"user","text":"x","kind":"sideways"}',  # outside a Literal
        b'["stream","x"]',
    ],
)
def test_malformed_events_raise_validation_error(wire: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_event(wire)


def test_an_unknown_tag_is_named_in_the_error() -> None:
    with pytest.raises(msgspec.ValidationError, match="no_such_kind"):
        decode_event(b'{"type":"no_such_kind","text":"x"}')


def test_invalid_json_raises_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_event(b'{"type":')


# --- generated round-trips for every kind --------------------------------------------------

PROPERTY = settings(max_examples=100, deadline=None)
"""No per-example deadline: a loaded CI machine must not turn slowness into failure."""

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def strategy_for(tp: object) -> st.SearchStrategy[object]:
    """A strategy for a msgspec field type; unknown types fail so the builder gets taught."""
    origin, args = get_origin(tp), get_args(tp)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return struct_strategy(tp)
    if tp is type(None):
        return st.none()
    if tp is str:
        return st.text(max_size=20)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(-(2**63), 2**63 - 1)
    if tp is object:
        return json_values
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (Union, types.UnionType):
        return st.one_of([strategy_for(arg) for arg in args])
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
    if origin is dict:
        return st.dictionaries(strategy_for(args[0]), strategy_for(args[1]), max_size=3)
    raise TypeError(f"no strategy for field type {tp!r}: teach strategy_for")


def struct_strategy(cls: type[msgspec.Struct]) -> st.SearchStrategy[object]:
    """Every required field, and any subset of the optional ones."""
    fields = msgspec.structs.fields(cls)
    required = {f.name: strategy_for(f.type) for f in fields if f.required}
    optional = {f.name: strategy_for(f.type) for f in fields if not f.required}
    return st.fixed_dictionaries(required, optional=optional).map(lambda kw: cls(**kw))


any_event = st.one_of([struct_strategy(cls) for cls in EVENT_KINDS])


@PROPERTY
@given(any_event)
def test_generated_events_round_trip(event: object) -> None:
    assert isinstance(event, EVENT_KINDS)
    typed = typing.cast(Event, event)
    assert decode_event(encode_event(typed)) == typed


@PROPERTY
@given(any_event, st.integers(1, 2**62), st.integers(0, 2**62))
def test_generated_records_round_trip(event: object, seq: int, ts: int) -> None:
    record = Record(seq=seq, session_id="root>child", ts=ts, event=typing.cast(Event, event))
    assert decode_record(encode_record(record)) == record
