"""Glob patterns for the workspace's ``glob`` and ``grep`` tools: parsing and matching.

A pattern is split into ``/`` segments: ``*``, ``?`` and ``[...]`` match within one
segment, ``**`` any number of directories. As in the shell, a wildcard does not
match a leading ``.``, and ``**`` does not cross hidden directories. Absolute
patterns and ``..`` segments are refused (``PathNotAccessible``) before any
directory is read. Pure functions; the walk itself is ``files.Workspace``'s.
"""

from __future__ import annotations

import fnmatch
import os

from halo_actors.core.errors import InvalidInput, PathNotAccessible

GlobParts = tuple[str, ...]
OUTSIDE = "path is outside the workspace"


def parse_glob(pattern: str) -> GlobParts:
    """Split a glob into segments; refuse absolute ones and any ``..`` segment."""
    if not pattern or "\x00" in pattern:
        raise InvalidInput("glob pattern is empty or contains a NUL byte")
    if os.path.isabs(pattern):
        raise PathNotAccessible(OUTSIDE)
    segs: list[str] = []
    for seg in pattern.split("/"):
        if seg == "..":
            raise PathNotAccessible(OUTSIDE)
        if seg in ("", ".") or (seg == "**" and segs and segs[-1] == "**"):
            continue
        segs.append(seg)
    return tuple(segs)


def glob_matches(parts: GlobParts, segs: GlobParts, *, prefix: bool) -> bool:
    """Whether ``parts`` match ``segs``; with ``prefix``, whether they could start a match."""
    if not parts:
        return prefix or all(s == "**" for s in segs)
    if not segs:
        return False
    if segs[0] == "**":
        for i in range(len(parts) + 1):
            if glob_matches(parts[i:], segs[1:], prefix=prefix):
                return True
            if i < len(parts) and parts[i].startswith("."):
                return False  # ``**`` does not cross hidden directories
        return False
    return _segment_matches(parts[0], segs[0]) and glob_matches(parts[1:], segs[1:], prefix=prefix)


def _segment_matches(name: str, seg: str) -> bool:
    if name.startswith(".") and not seg.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, seg)
