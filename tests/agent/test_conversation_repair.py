"""Conversation repair: a pure, idempotent function; every tool_use ends up answered once.

The generated conversations have the shapes a cut turn leaves behind: assistant
messages with parallel tool calls whose results are partly missing (or all), empty
text blocks anywhere, assistant messages left with nothing but an empty text.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from halo_actors.agent.repair import INTERRUPTED_RESULT, RepairCache, repair, unanswered
from halo_actors.core.conversation import (
    Block,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    message_chars,
    user_text,
)

texts = st.sampled_from(["", "", "hello", "done", "x"])


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """User rounds, assistant replies with 0–3 calls, and a subset of their results."""
    ids = itertools.count()
    messages: list[Message] = []
    for _ in range(draw(st.integers(0, 6))):
        messages.append(Message(role="user", content=(TextBlock(text=draw(texts)),)))
        for _ in range(draw(st.integers(0, 3))):
            uses = [
                ToolUseBlock(id=f"toolu_{next(ids)}", name="shell_exec", input={"command": "ls"})
                for _ in range(draw(st.integers(0, 3)))
            ]
            content: list[Block] = [TextBlock(text=draw(texts)), *uses]
            messages.append(Message(role="assistant", content=tuple(content)))
            answered = (
                draw(st.lists(st.sampled_from(uses), unique_by=lambda u: u.id)) if uses else []
            )
            if not answered and uses and draw(st.booleans()):
                break  # the turn was cut right after the model asked for the batch
            results: list[Block] = [
                ToolResultBlock(tool_use_id=u.id, content="out") for u in answered
            ]
            if draw(st.booleans()):
                results.append(TextBlock(text=""))
            if results:
                messages.append(Message(role="user", content=tuple(results)))
    return messages


def results_for(messages: list[Message]) -> list[str]:
    return [b.tool_use_id for m in messages for b in m.content if isinstance(b, ToolResultBlock)]


@settings(max_examples=200)
@given(conversations())
def test_repair_is_idempotent(messages: list[Message]) -> None:
    once = repair(messages)
    assert repair(once) == once


@settings(max_examples=200)
@given(conversations())
def test_repair_gives_every_tool_use_exactly_one_result_right_after_it(
    messages: list[Message],
) -> None:
    repaired = repair(messages)
    answered = results_for(repaired)
    for index, message in enumerate(repaired):
        for use in message.tool_uses():
            assert answered.count(use.id) == 1
            following = repaired[index + 1]
            assert following.role == "user"
            assert use.id in results_for([following])
    assert unanswered(repaired) == []


@settings(max_examples=200)
@given(conversations())
def test_repair_strips_empty_text_blocks_and_keeps_the_rest_in_order(
    messages: list[Message],
) -> None:
    repaired = repair(messages)
    blocks = [b for m in repaired for b in m.content]
    assert not any(isinstance(b, TextBlock) and not b.text for b in blocks)
    assert all(m.content for m in repaired)
    kept = [b for m in messages for b in m.content if not (isinstance(b, TextBlock) and not b.text)]
    synthesized = [b for b in blocks if isinstance(b, ToolResultBlock) and b.is_error]
    assert [b for b in blocks if b not in synthesized] == kept


def test_repair_answers_a_cut_call_with_the_do_not_retry_marker() -> None:
    use = ToolUseBlock(id="toolu_1", name="shell_exec", input={"command": "sleep 60"})
    messages = [user_text("go"), Message(role="assistant", content=(use,))]

    repaired = repair(messages)

    assert repaired[-1] == Message(
        role="user",
        content=(
            ToolResultBlock(tool_use_id="toolu_1", content=INTERRUPTED_RESULT, is_error=True),
        ),
    )
    assert "Do not retry" in INTERRUPTED_RESULT


def test_repair_adds_missing_results_next_to_the_results_that_landed() -> None:
    a = ToolUseBlock(id="a", name="shell_exec")
    b = ToolUseBlock(id="b", name="shell_exec")
    landed = ToolResultBlock(tool_use_id="a", content="out")
    messages = [
        user_text("go"),
        Message(role="assistant", content=(a, b)),
        Message(role="user", content=(landed,)),
        user_text("next"),
    ]

    repaired = repair(messages)

    assert repaired[2].content == (
        landed,
        ToolResultBlock(tool_use_id="b", content=INTERRUPTED_RESULT, is_error=True),
    )
    assert repaired[3] == user_text("next")


def test_repair_drops_a_message_left_empty_by_stripping() -> None:
    messages = [user_text("go"), Message(role="assistant", content=(TextBlock(text=""),))]

    assert repair(messages) == [user_text("go")]


def test_repair_leaves_its_input_unchanged() -> None:
    use = ToolUseBlock(id="a", name="shell_exec")
    messages = [user_text(""), Message(role="assistant", content=(use,))]
    before = list(messages)

    repair(messages)

    assert messages == before


@settings(max_examples=300)
@given(conversations(), st.lists(st.integers(0, 40), max_size=8), st.data())
def test_the_repair_cache_always_gives_what_a_full_repair_gives(
    whole: list[Message], cuts: list[int], data: st.DataObject
) -> None:
    """Grow a conversation in pieces, sometimes editing a message in place (as a late
    tool result or a compaction does); every view equals ``repair`` of the whole."""
    cache = RepairCache()
    grown: list[Message] = []
    for cut in [*sorted(cuts), len(whole)]:
        edited_from = len(grown)
        grown.extend(whole[len(grown) : max(cut, len(grown))])
        if len(grown) > 0 and data.draw(st.booleans()):
            index = data.draw(st.integers(0, len(grown) - 1))
            grown[index] = Message(role="user", content=(TextBlock(text="edited"),))
            edited_from = min(edited_from, index)
        chars = sum(map(message_chars, grown))
        view = cache.view(grown, edited_from, chars)
        assert view == tuple(repair(grown))
        assert cache.chars_of(view) == sum(map(message_chars, repair(grown)))


@settings(max_examples=200)
@given(conversations(), st.lists(st.integers(0, 40), max_size=8))
def test_the_repair_cache_knows_the_size_of_its_last_view_only(
    whole: list[Message], cuts: list[int]
) -> None:
    """The size a request is measured by (``ContextMeasured``'s estimate) is the size of the
    view the model got: kept from the caller's running size for the last view, counted for
    any other tuple (an earlier view, a copy), never taken from a stale figure."""
    cache = RepairCache()
    grown: list[Message] = []
    views: list[tuple[Message, ...]] = []
    for cut in [*sorted(cuts), len(whole)]:
        edited_from = len(grown)
        grown.extend(whole[len(grown) : max(cut, len(grown))])
        views.append(cache.view(grown, edited_from, sum(map(message_chars, grown))))
    for view in views:
        assert cache.chars_of(view) == sum(map(message_chars, view))
    assert cache.chars_of(tuple(views[-1])) == sum(map(message_chars, views[-1]))
    cache.view(grown, len(grown))  # a view made without the size known
    assert cache.chars_of(views[-1]) == sum(map(message_chars, views[-1]))
