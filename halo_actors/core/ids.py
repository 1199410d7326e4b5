"""Session ids and every tree rule; nobody else slices id strings.

A session id is a path of safe segments joined by ``>``: ``root>child>grandchild``.
The root segment carries the creating front's namespace (``web_<account>_…``,
``cli_…``). Two sessions are in the same tree iff their roots are equal.

Invariants:
- every id accepted by :func:`check_session_id` is made only of safe segments,
  so it is safe in file names and SQL;
- a tree is at most ``MAX_DEPTH`` levels deep (a root and ``MAX_DEPTH - 1`` levels
  below it): a longer id is unsafe, and :func:`child_id` refuses to make one;
- ``parent_of(child_id(p, s)) == p`` and ``root_of`` is stable along a tree.
"""

from __future__ import annotations

import re
import secrets
import time

from .errors import UnsafeSessionId

SEPARATOR = ">"
MAX_SEGMENT_LENGTH = 128
MAX_DEPTH = 32
"""Most segments an id may have: the cap on a tree's depth."""
_SAFE_SEGMENT = re.compile(r"[A-Za-z0-9_.-]+")
_UNSAFE_LABEL_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
_SEGMENT = rf"(?!\.\.?(?:{SEPARATOR}|\Z))[A-Za-z0-9_.-]{{1,{MAX_SEGMENT_LENGTH}}}"
_SAFE_ID = re.compile(rf"{_SEGMENT}(?:{SEPARATOR}{_SEGMENT}){{0,{MAX_DEPTH - 1}}}")
"""A whole id in one match (it is checked on every append): the segment rule below."""


def is_safe_segment(segment: str) -> bool:
    """Non-empty, at most ``MAX_SEGMENT_LENGTH`` characters of ``[A-Za-z0-9_.-]``."""
    return (
        0 < len(segment) <= MAX_SEGMENT_LENGTH
        and _SAFE_SEGMENT.fullmatch(segment) is not None
        and segment not in (".", "..")
    )


def is_safe_session_id(session_id: str) -> bool:
    """At most ``MAX_DEPTH`` segments, each one :func:`is_safe_segment`."""
    return _SAFE_ID.fullmatch(session_id) is not None


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` unchanged if it is a safe id, else raise ``UnsafeSessionId``."""
    if not isinstance(session_id, str) or not is_safe_session_id(session_id):
        shown = repr(session_id)[:80]
        raise UnsafeSessionId(f"unsafe session id {shown}")
    return session_id


def check_segment(segment: object) -> str:
    if not isinstance(segment, str) or not is_safe_segment(segment):
        raise UnsafeSessionId(f"unsafe session id segment {repr(segment)[:80]}")
    return segment


def root_of(session_id: str) -> str:
    """The left-most segment: the tree a session belongs to."""
    return session_id.partition(SEPARATOR)[0]


def is_root(session_id: str) -> bool:
    return SEPARATOR not in session_id


def parent_of(session_id: str) -> str | None:
    """The parent's id, or None for a root."""
    head, sep, _ = session_id.rpartition(SEPARATOR)
    return head if sep else None


def depth(session_id: str) -> int:
    """0 for a root, 1 for its children, …"""
    return session_id.count(SEPARATOR)


def same_tree(a: str, b: str) -> bool:
    return root_of(a) == root_of(b)


def is_self_or_ancestor(target: str, caller: str) -> bool:
    """True iff ``target`` is ``caller`` itself or one of its ancestors."""
    return caller == target or caller.startswith(target + SEPARATOR)


def is_in_subtree(session_id: str, subtree_root: str) -> bool:
    """True iff ``session_id`` is ``subtree_root`` or one of its descendants."""
    return is_self_or_ancestor(subtree_root, session_id)


def child_id(parent: str, segment: str) -> str:
    """The id of ``parent``'s child named ``segment`` (checked safe, and within the depth cap)."""
    if depth(parent) + 2 > MAX_DEPTH:
        raise UnsafeSessionId(f"session tree too deep: at most {MAX_DEPTH} levels")
    return parent + SEPARATOR + check_segment(segment)


def mint_root(namespace: str) -> str:
    """A fresh root id ``<namespace>_<ms>_<rand>``; the namespace must be a safe segment."""
    return check_segment(f"{namespace}_{time.time_ns() // 1_000_000}_{secrets.token_hex(4)}")


def mint_child(parent: str, label: str) -> str:
    """A fresh child id ``parent>label_<rand>`` (label made safe by dropping other characters)."""
    cleaned = _UNSAFE_LABEL_CHARS.sub("", label)[:40]
    return child_id(parent, f"{cleaned or 'sub'}_{secrets.token_hex(3)}")
