"""The session list's titles from stored records (``core/log/pglisting.py``) are the ones
``SessionState`` folds: the creation's title, else the first queued message that gives
one, else the description."""

from __future__ import annotations

from halo_actors.core.events import MessageQueued, Record, SessionCreated, encode_record
from halo_actors.core.log.pglisting import title_needs_more, title_of
from halo_actors.core.state import SessionState


def body(seq: int, event: SessionCreated | MessageQueued) -> bytes:
    return encode_record(Record(seq=seq, session_id="web_a_1", ts=seq, event=event))


def folded(*events: SessionCreated | MessageQueued) -> str | None:
    state = SessionState("web_a_1")
    for seq, event in enumerate(events, 1):
        state.apply(Record(seq=seq, session_id="web_a_1", ts=seq, event=event))
    return state.title or state.description or None


def test_a_listed_title_is_the_one_the_session_state_folds() -> None:
    cases: list[tuple[SessionCreated, list[MessageQueued]]] = [
        (SessionCreated(agent_id="default", title="Named"), [MessageQueued(text="hello")]),
        (SessionCreated(agent_id="default"), [MessageQueued(text="  \n Plan   the garden\nmore")]),
        (SessionCreated(agent_id="default", description="what it is for"), []),
        (
            SessionCreated(agent_id="default", description="what it is for"),
            [MessageQueued(text=" "), MessageQueued(text="late")],
        ),
        (SessionCreated(agent_id="default"), [MessageQueued(text=""), MessageQueued(text="")]),
    ]
    for created, messages in cases:
        stored = [body(seq, m) for seq, m in enumerate(messages, 2)]
        first = stored[:1]
        looked = stored if title_needs_more(body(1, created), first, 1) else first
        assert title_of(body(1, created), looked) == folded(created, *messages)
