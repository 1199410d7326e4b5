"""Suite 3: runtime bugs the model found that are not fixed yet, and how to tell them apart.

Each bug has a regression test in ``tests/runtime/test_runtime_found_by_chaos.py``
(``xfail(strict=True)``: it starts failing, and must be removed from here, the day
the bug is fixed). Until then a violation is put down to a known bug when its rule
is that bug's own rule, or when it is about a session the bug has *tainted* (or a
session under it): what happens to such a session afterwards follows from the bug,
not from a new one. Every other violation fails the example.
"""

from __future__ import annotations

from collections import Counter

from tree_model import TreeModel, Violation

from halo_actors.core import ids

KNOWN_BUGS: dict[str, str] = {}
"""Bug name -> what it does and its xfail regression test. Empty: the three bugs this
suite found (half-created sessions, late delivery into an archive, children escaping
a cascade) are fixed; their regressions in ``test_runtime_found_by_chaos.py`` pass."""
_OWN_RULES: dict[str, str] = {}
"""Rule name -> the known bug that rule reports (e.g. ``HALF_CREATED``)."""


def tainted(model: TreeModel) -> dict[str, str]:
    """Session id -> the known bug that put it in a state the tree rules do not allow."""
    found: dict[str, str] = {}
    if "cascade-escape" in KNOWN_BUGS:
        found.update({sid: "cascade-escape" for sid in model.escaped})
    if "half-created" in KNOWN_BUGS:
        for sid in model.journal.seen:
            if sid not in model.created:  # registered, never logged
                found[sid] = "half-created"
    return found


def classify(model: TreeModel, violations: list[Violation]) -> tuple[list[Violation], Counter[str]]:
    """(violations no known bug explains, how many each known bug explained)."""
    taint = tainted(model)
    unknown: list[Violation] = []
    known: Counter[str] = Counter()
    for violation in violations:
        bug = _OWN_RULES.get(violation.rule) or next(
            (
                taint[t]
                for sid in (violation.session, violation.target)
                for t in taint
                if ids.is_safe_session_id(sid) and ids.is_in_subtree(sid, t)
            ),
            None,
        )
        if bug is None:
            unknown.append(violation)
        else:
            known[bug] += 1
    return unknown, known
