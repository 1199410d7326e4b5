"""Property tests of every tree rule in ``halo_actors.core.ids``.

Each rule is checked against a tiny model that works on lists of segments, never
on id strings: an id *is* its list of segments, its root is the first one, and
``t`` is ``c`` or one of its ancestors iff ``t``'s segments are a prefix of ``c``'s.
Ids are drawn from a two-letter alphabet so that equal roots, shared prefixes and
the ``a>b`` / ``a>bc`` trap come up often.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from halo_actors.core.errors import InvalidInput, UnsafeSessionId
from halo_actors.core.ids import (
    MAX_DEPTH,
    MAX_SEGMENT_LENGTH,
    SEPARATOR,
    check_segment,
    check_session_id,
    child_id,
    depth,
    is_in_subtree,
    is_root,
    is_safe_segment,
    is_safe_session_id,
    is_self_or_ancestor,
    mint_child,
    mint_root,
    parent_of,
    root_of,
    same_tree,
)

SAFE_CHARS = string.ascii_letters + string.digits + "_.-"
UNSAFE_CHARS = ">/\\ :\x00\n\téß٣"  # separator, path, space, control, non-ASCII (incl. a digit)

PROPERTY = settings(max_examples=60, deadline=None)
"""No per-example deadline: a loaded CI machine must not turn slowness into failure."""

# --- strategies ----------------------------------------------------------------

safe_segments = st.text(SAFE_CHARS, min_size=1, max_size=24).filter(lambda s: s not in (".", ".."))
tight_segments = st.text("ab", min_size=1, max_size=2)
"""Few distinct values, so roots collide and one segment is often a prefix of another."""


def paths(segments: st.SearchStrategy[str], max_size: int = 6) -> st.SearchStrategy[list[str]]:
    return st.lists(segments, min_size=1, max_size=max_size)


def join(path: list[str]) -> str:
    return SEPARATOR.join(path)


def model_segment_is_safe(segment: str) -> bool:
    return (
        0 < len(segment) <= MAX_SEGMENT_LENGTH
        and all(c in SAFE_CHARS for c in segment)
        and segment not in (".", "..")
    )


# --- root_of, is_root, depth, same_tree -----------------------------------------


@PROPERTY
@given(paths(safe_segments))
def test_root_of_is_the_first_segment(path: list[str]) -> None:
    session_id = join(path)
    assert root_of(session_id) == path[0]
    assert is_root(root_of(session_id))
    assert depth(session_id) == len(path) - 1
    assert is_root(session_id) == (len(path) == 1)


@PROPERTY
@given(paths(safe_segments), safe_segments)
def test_root_of_is_stable_along_the_tree(path: list[str], segment: str) -> None:
    parent = join(path)
    assert root_of(child_id(parent, segment)) == root_of(parent)


@PROPERTY
@given(paths(tight_segments), paths(tight_segments))
def test_same_tree_iff_roots_are_equal(a: list[str], b: list[str]) -> None:
    assert same_tree(join(a), join(b)) == (a[0] == b[0])
    assert same_tree(join(a), join(b)) == same_tree(join(b), join(a))
    assert same_tree(join(a), join(a))


def test_same_tree_is_not_fooled_by_a_root_prefix() -> None:
    assert not same_tree("web_a", "web_ab>child")
    assert not same_tree("web_a>x", "web_ab>x")


# --- is_self_or_ancestor / is_in_subtree -----------------------------------------


@PROPERTY
@given(paths(tight_segments), paths(tight_segments))
@example(["a", "b"], ["a", "bc"])  # the prefix trap, spelled out
@example(["a"], ["ab"])
def test_ancestry_is_segment_prefix(target: list[str], caller: list[str]) -> None:
    expected = caller[: len(target)] == target
    assert is_self_or_ancestor(join(target), join(caller)) == expected
    assert is_in_subtree(join(caller), join(target)) == expected


@PROPERTY
@given(paths(safe_segments))
def test_is_self_or_ancestor_is_reflexive(path: list[str]) -> None:
    assert is_self_or_ancestor(join(path), join(path))
    assert is_in_subtree(join(path), join(path))


@PROPERTY
@given(paths(safe_segments), safe_segments)
def test_a_childs_parent_is_its_ancestor_and_not_the_reverse(path: list[str], segment: str) -> None:
    parent, child = join(path), child_id(join(path), segment)
    assert is_self_or_ancestor(parent, child)
    assert not is_self_or_ancestor(child, parent)


@PROPERTY
@given(paths(safe_segments), safe_segments, safe_segments, safe_segments)
def test_every_ancestor_up_to_the_root_counts(path: list[str], a: str, b: str, c: str) -> None:
    leaf = child_id(child_id(child_id(join(path), a), b), c)
    ancestor: str | None = leaf
    while ancestor is not None:
        assert is_self_or_ancestor(ancestor, leaf)
        ancestor = parent_of(ancestor)


@PROPERTY
@given(paths(safe_segments), safe_segments, safe_segments)
def test_siblings_are_not_ancestors_of_each_other(path: list[str], s1: str, s2: str) -> None:
    parent = join(path)
    first, second = child_id(parent, s1), child_id(parent, s2)
    assert is_self_or_ancestor(first, second) == (s1 == s2)
    assert is_self_or_ancestor(second, first) == (s1 == s2)


@PROPERTY
@given(paths(safe_segments), safe_segments, st.text(SAFE_CHARS, min_size=1, max_size=5))
def test_a_segment_prefix_is_not_an_ancestor(path: list[str], segment: str, extra: str) -> None:
    """``a>b`` is not an ancestor of ``a>bc``, nor ``a`` of ``ab``."""
    parent = join(path)
    assert not is_self_or_ancestor(child_id(parent, segment), child_id(parent, segment + extra))
    assert not is_self_or_ancestor(path[0], path[0] + extra)


# --- child_id / parent_of ---------------------------------------------------------


@PROPERTY
@given(paths(safe_segments), safe_segments)
def test_child_id_and_parent_of_round_trip(path: list[str], segment: str) -> None:
    parent = join(path)
    child = child_id(parent, segment)
    assert parent_of(child) == parent
    assert depth(child) == depth(parent) + 1
    assert child.split(SEPARATOR) == [*path, segment]


@PROPERTY
@given(safe_segments)
def test_a_root_has_no_parent(segment: str) -> None:
    assert parent_of(segment) is None


@PROPERTY
@given(paths(safe_segments))
def test_parent_of_drops_exactly_the_last_segment(path: list[str]) -> None:
    expected = join(path[:-1]) if len(path) > 1 else None
    assert parent_of(join(path)) == expected


@PROPERTY
@given(paths(safe_segments, max_size=3), st.text(SAFE_CHARS + UNSAFE_CHARS, max_size=10))
def test_child_id_refuses_an_unsafe_segment(path: list[str], segment: str) -> None:
    if model_segment_is_safe(segment):
        assert child_id(join(path), segment).endswith(SEPARATOR + segment)
    else:
        with pytest.raises(UnsafeSessionId):
            child_id(join(path), segment)


# --- the safe segment rule ----------------------------------------------------------


@PROPERTY
@given(st.text(SAFE_CHARS + UNSAFE_CHARS, max_size=12))
@example("")
@example(".")
@example("..")
@example("...")
@example("a\n")
def test_safe_segment_rule(segment: str) -> None:
    """Non-empty, bounded, ``[A-Za-z0-9_.-]`` only, and not ``.`` or ``..``."""
    assert is_safe_segment(segment) == model_segment_is_safe(segment)
    if model_segment_is_safe(segment):
        assert check_segment(segment) == segment
    else:
        with pytest.raises(UnsafeSessionId):
            check_segment(segment)


def test_segment_length_is_bounded() -> None:
    assert is_safe_segment("a" * MAX_SEGMENT_LENGTH)
    assert not is_safe_segment("a" * (MAX_SEGMENT_LENGTH + 1))
    assert not is_safe_session_id("r>" + "a" * (MAX_SEGMENT_LENGTH + 1))


@pytest.mark.parametrize("segment", [".", ".."])
def test_dot_segments_are_refused_anywhere_in_an_id(segment: str) -> None:
    for session_id in (segment, f"root>{segment}", f"{segment}>child", f"r>{segment}>c"):
        with pytest.raises(UnsafeSessionId):
            check_session_id(session_id)


# --- check_session_id ----------------------------------------------------------------


@PROPERTY
@given(st.lists(st.text(SAFE_CHARS + UNSAFE_CHARS, max_size=6), min_size=1, max_size=5))
@example(["a", ""])  # a trailing separator
@example(["", "a"])  # a leading separator
def test_check_session_id_accepts_exactly_safe_segment_paths(path: list[str]) -> None:
    session_id = join(path)
    safe = all(model_segment_is_safe(s) for s in session_id.split(SEPARATOR))
    assert is_safe_session_id(session_id) == safe
    if safe:
        assert check_session_id(session_id) is session_id
    else:
        with pytest.raises(UnsafeSessionId):
            check_session_id(session_id)


def test_session_depth_is_bounded() -> None:
    deepest = join(["s"] * MAX_DEPTH)
    assert check_session_id(deepest) == deepest
    with pytest.raises(UnsafeSessionId):
        check_session_id(join(["s"] * (MAX_DEPTH + 1)))


def test_a_child_past_the_depth_cap_is_refused_with_a_clear_error() -> None:
    """The id depth is capped: ``child_id`` never makes an id deeper than ``MAX_DEPTH``."""
    deepest = join(["s"] * MAX_DEPTH)
    assert child_id(join(["s"] * (MAX_DEPTH - 1)), "s") == deepest
    with pytest.raises(UnsafeSessionId, match=f"too deep: at most {MAX_DEPTH} levels"):
        child_id(deepest, "s")


@pytest.mark.parametrize("value", [None, 42, 1.5, b"root", ["root"], ("root",), {"id": "root"}])
def test_check_session_id_refuses_non_strings(value: object) -> None:
    with pytest.raises(UnsafeSessionId):
        check_session_id(value)
    with pytest.raises(UnsafeSessionId):
        check_segment(value)


def test_unsafe_session_id_is_an_invalid_input_and_a_value_error() -> None:
    with pytest.raises(InvalidInput):
        check_session_id("../etc/passwd")
    with pytest.raises(ValueError, match="unsafe session id"):
        check_session_id("a b")


def test_the_error_message_is_bounded() -> None:
    with pytest.raises(UnsafeSessionId) as caught:
        check_session_id("/" * 10_000)
    assert len(str(caught.value)) < 200


# --- mint_root / mint_child ----------------------------------------------------------


@PROPERTY
@given(st.text(SAFE_CHARS, min_size=1, max_size=40))
def test_mint_root_makes_a_safe_fresh_root_in_its_namespace(namespace: str) -> None:
    root = mint_root(namespace)
    assert check_session_id(root) == root
    assert is_root(root)
    assert root.startswith(namespace + "_")
    assert mint_root(namespace) != root


@PROPERTY
@given(st.text(SAFE_CHARS + UNSAFE_CHARS, min_size=1, max_size=10))
def test_mint_root_refuses_an_unsafe_namespace(namespace: str) -> None:
    if all(c in SAFE_CHARS for c in namespace):
        assert is_root(mint_root(namespace))
    else:
        with pytest.raises(UnsafeSessionId):
            mint_root(namespace)


@PROPERTY
@given(paths(safe_segments), st.text(max_size=60))
@example(["root"], "")
@example(["root"], ">>/..")
@example(["root"], "日本語")
def test_mint_child_makes_a_safe_fresh_child_in_the_same_tree(path: list[str], label: str) -> None:
    parent = join(path)
    child = mint_child(parent, label)
    assert check_session_id(child) == child
    assert parent_of(child) == parent
    assert same_tree(child, parent)
    assert is_self_or_ancestor(parent, child)
    assert not is_self_or_ancestor(child, parent)
    assert mint_child(parent, label) != child
