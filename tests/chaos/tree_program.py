"""Programs of chaos suite 3 (the supervisor model): what hypothesis generates.

A :class:`Program` is two or three trees and a list of :class:`Op` s the driver
(``tree_driver.py``) plays in order against one real supervisor. An op is either a
**direct** call on the supervisor, already authorised like the HTTP front's
(``send``, ``interrupt``, ``start_child``, ``stop``, ``archive``, ``delete``, ``root``),
or a change of pace (``pause``, ``settle``). A ``send`` or ``interrupt`` carries
:class:`Directive` s: session tool calls the receiving session makes from inside
its next turn, on targets picked relative to it (itself, its ancestors, its
subtree, its tree, an archived or deleted session of it, another tree, unknown and
unsafe ids). That is the gated path.

The scripted agents (:func:`agent_script`) answer three kinds of rounds:

- a round holding directives (``do#<k>``, one per planned call) runs them as one
  parallel batch, after a delay, then streams a short answer;
- a round asking for work (``work=<n>``) streams an answer for ``n`` time units;
- anything else (a query, a report, a task) gets a short answer.

No answer ever contains ``do#``, so a directive runs only when the driver's own
message is drained into a round, and at most once. Every answer carries its
tree's tag (``[tree<i>]``) so a leak into another tree is visible in any output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hypothesis import strategies as st

from halo_actors.agent.scripted import Rule, Script, ScriptedCall, Step
from halo_actors.runtime.profiles import AgentProfile, Profiles

TOOLS = (
    "query_session",
    "list_sessions",
    "get_session_output",
    "interrupt_session",
    "start_session",
    "stop_session",
    "archive_session",
)
RELATIONS = (
    "self",
    "parent",
    "ancestor",
    "child",
    "descendant",
    "sibling",
    "tree",
    "gone",
    "foreign",
    "unknown",
    "unsafe",
)
UNSAFE_IDS = ("", "../x", "a b", ">x", "x>", "a" * 200, "nul\x00", "é", "x;--")
VERBS = (
    # Repeats weight the draw; hypothesis shrinks towards the first entry.
    *("send",) * 6,
    *("pause",) * 3,
    *("interrupt",) * 2,
    *("start_child",) * 2,
    *("stop",) * 2,
    *("archive",) * 2,
    "settle",
    "delete",
    "root",
)
TARGET_RANGE = 100
LIVE_TARGETS = 60
"""``Op.target`` below this picks a session that is not archived, if there is one (for
a stop, archive or delete: one that is not a root, so trees keep a live part)."""
UNKNOWN_TARGETS = 6
"""``Op.target`` values at the top of its range name ids that never exist (or are unsafe);
the ones between pick any session ever seen (archived and deleted ones too)."""

AGENTS = ("default", "helper", "ghost", "lead")
"""Agents a ``start_session`` may ask for: ``ghost`` is in a team but has no profile."""
TEAMS: Mapping[str, tuple[str, ...]] = {
    "default": ("default", "helper", "ghost"),
    "lead": ("helper",),
    "helper": (),
}
PROFILES = Profiles({name: AgentProfile(name=name, team=team) for name, team in TEAMS.items()})
ROOT_AGENTS = ("default", "lead")

DIRECTIVE = re.compile(r"do#(\d+)")
WORK = re.compile(r"work=(\d+)")
TAG = re.compile(r"\[tree\d+\]")


@dataclass(frozen=True)
class Directive:
    """A session tool call a session makes when it drains the message carrying it."""

    tool: str
    relation: str
    index: int
    flag: bool
    """``query_session``: ``interrupt=true``."""


@dataclass(frozen=True)
class Op:
    verb: str
    target: int
    """Picks the session a direct call targets (see ``LIVE_TARGETS``, ``UNKNOWN_TARGETS``)."""
    directives: tuple[Directive, ...] = ()
    work: int = 0
    """Time units the receiving turn works for (also the length of a ``pause``)."""


@dataclass(frozen=True)
class Program:
    trees: tuple[tuple[str, int], ...]
    """The agent of each initial root and how many children the driver starts under it."""
    ops: tuple[Op, ...]


directives = st.builds(
    Directive,
    tool=st.sampled_from(TOOLS),
    relation=st.sampled_from(RELATIONS),
    index=st.integers(0, 7),
    flag=st.booleans(),
)
ops = st.builds(
    Op,
    verb=st.sampled_from(VERBS),
    target=st.integers(0, TARGET_RANGE - 1),
    directives=st.lists(directives, max_size=4).map(tuple),
    work=st.integers(0, 4),
)


def programs(max_ops: int) -> st.SearchStrategy[Program]:
    return st.builds(
        Program,
        trees=st.lists(
            st.tuples(st.sampled_from(ROOT_AGENTS), st.integers(0, 2)), min_size=2, max_size=3
        ).map(tuple),
        ops=st.lists(ops, min_size=max_ops // 3, max_size=max_ops).map(tuple),
    )


def agent_script(table: Mapping[int, ScriptedCall], unit: float) -> Script:
    """The script every agent plays; ``table`` maps a directive number to its call."""

    def run_directives(found: re.Match[str]) -> tuple[Step, ...]:
        calls = tuple(table[int(k)] for k in DIRECTIVE.findall(found.string))
        return (
            Step(calls=calls, delay=unit * _work(found.string)),
            Step(text=f"did {len(calls)} calls {_tag(found.string)}", chunk=6, delay=unit),
        )

    def work(found: re.Match[str]) -> tuple[Step, ...]:
        text = f"worked for {found[1]} units {_tag(found.string)}"
        return (Step(text=text, chunk=5, delay=unit * int(found[1])),)

    def answer(found: re.Match[str]) -> tuple[Step, ...]:
        return (Step(text=f"ok {_tag(found.string)}", delay=unit),)

    return Script(
        rules=(
            Rule(match=DIRECTIVE.pattern, build=run_directives),
            Rule(match=WORK.pattern, build=work),
            Rule(build=answer),
        )
    )


def _work(text: str) -> int:
    found = WORK.search(text)
    return int(found[1]) if found else 0


def _tag(text: str) -> str:
    found = TAG.search(text)
    return found[0] if found else ""
