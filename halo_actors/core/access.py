"""Access levels: what a session may do, fixed by whoever created it.

A session records, in its ``session_created`` event, the access level of the token
(or embedding program) that created it; its sub-sessions inherit it, and nothing
later raises it (ARCHITECTURE decision 10, ``docs/security.md``):

- ``readonly``: no shell at all, file tools read-only inside the workspace;
- ``workspace``: the shell runs in a sandbox that sees only the workspace (minus its
  runtime state); file tools read and write inside the workspace;
- ``full``: a trusted operator: an unconfined shell.

Levels are ordered ``readonly < workspace < full``; :func:`weakest` combines limits
(a profile may lower a session's level, never raise it).
"""

from __future__ import annotations

from typing import Literal

Access = Literal["full", "workspace", "readonly"]
ACCESS_LEVELS: tuple[Access, ...] = ("full", "workspace", "readonly")
"""Strongest first."""

_RANK: dict[Access, int] = {"readonly": 0, "workspace": 1, "full": 2}


def weakest(*levels: Access) -> Access:
    """The most restrictive of ``levels`` (at least one)."""
    if len(levels) == 2:  # the usual call: a level and a ceiling
        first, second = levels
        return first if _RANK[first] <= _RANK[second] else second
    return min(levels, key=_RANK.__getitem__)


def as_access(value: str) -> Access | None:
    """``value`` as an access level, or None when it names none."""
    for level in ACCESS_LEVELS:
        if value == level:
            return level
    return None
