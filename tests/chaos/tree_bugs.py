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

from tree_answers import HALF_CREATED
from tree_model import TreeModel, Violation
from tree_rules import ESCAPED, LATE_DELIVERY

from halo_actors.core import ids

KNOWN_BUGS = {
    "half-created": (
        "a session is registered before its creation is logged: list_sessions can show it "
        "with no parent, and a start cut at that await leaves it registered with no record "
        "(gone after a restart); "
        "test_a_start_cut_before_its_creation_is_logged_leaves_no_session"
    ),
    "late-delivery": (
        "a message whose send passed the lifecycle check before an archive (or delete) "
        "completed is queued after it, into the archived session, answered 'started', and "
        "claims a run that ends at once; "
        "test_a_message_sent_while_an_archive_completes_is_refused_or_discarded"
    ),
    "cascade-escape": (
        "a child started while a stop/archive/delete of its parent runs escapes the cascade "
        "(live under an archived or deleted parent); "
        "test_a_child_started_during_an_archive_of_its_parent_is_archived_too"
    ),
}
_OWN_RULES = {
    HALF_CREATED: "half-created",
    ESCAPED: "cascade-escape",
    LATE_DELIVERY: "late-delivery",
}


def tainted(model: TreeModel) -> dict[str, str]:
    """Session id -> the known bug that put it in a state the tree rules do not allow."""
    found = {sid: "cascade-escape" for sid in model.escaped}
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
