"""Suite 3: the tree rules over one whole example (``check_example`` is the entry point).

Besides the gated answers (``tree_answers.py``) the model checks:

- **direct calls** answer as the model says: ``not found`` for an id that never
  existed or was deleted, ``unavailable`` for an archived session, a delivery or
  a cascade otherwise (and any of them while an archive raced the call);
- **cascades cover the subtree**: once an archive (delete) returns, every session
  under its target that existed by then is archived (deleted); once a stop
  returns, every one of them was stopped or archived while it ran; no session is
  ever created under a session already gone;
- **never resurrect**: after ``archived`` a session logs nothing but flags,
  discards and another archive; after ``deleted`` nothing at all; after ``stopped``
  the next round is an opening round that drains a new message; no ``resume``
  round ever (the agents never call ``continue_task``);
- **every lifecycle change has a cause** in the same tree: each ``stopped``,
  ``archived``, ``deleted`` record follows the start of a cascade covering it;
- **messages**: for every (session, sender) pair the number of queued messages
  lies between what surely was sent (deliveries answered ``started``/``queued``,
  tasks of created children) and what may have been (cut calls, reports); no
  sender from another tree; every message queued was drained, folded, discarded
  or is still in the mailbox.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from tree_answers import CUT_RESULTS, check_calls, derive_cascades, parse
from tree_journal import DirectOp, Journal
from tree_model import NEVER, Cascade, Checks, TreeModel, mailbox_accounting

from halo_actors.core import ids
from halo_actors.core.events import MessageQueued, Record, ReportSent, RoundStarted, kind_of

ESCAPED = "cascade_missed_new_child"
"""Rule: a child born under a cascade's target while it ran escaped it (a bug this suite
found, now fixed; its own rule name lets ``tree_bugs`` tell it apart if it comes back)."""
LATE_DELIVERY = "delivered_after_archive"
"""Rule: a message that passed its check before an archive landed after it (likewise)."""
LATE_KINDS = frozenset({"message_queued", "flags", "agent_done", "archived"})
"""What such a late delivery logs: the message, and the run it claims ending at once."""
AFTER_ARCHIVE = frozenset({"archived", "deleted", "flags", "mailbox_discarded"})
SUCCESS = {
    "send": {"started", "queued"},
    "interrupt": {"started", "queued"},
    "start_child": {"created"},
    "stop": {"true", "false"},
    "archive": {"true", "false"},
    "delete": {"true"},
}
ON_ARCHIVED = {
    "send": {"unavailable"},
    "interrupt": {"unavailable"},
    "start_child": {"unavailable"},
    "stop": {"false"},
    "archive": {"false"},
    "delete": {"true"},
}
Sent = Callable[[tuple[str, str | None], bool], None]
"""Counts one message to (session, sender): sent surely, or only maybe."""
CAUSES = {"stopped": ("stop", "archive", "delete"), "archived": ("archive", "delete")}


def check_example(
    journal: Journal, records: list[Record], left: Mapping[str, int], checks: Checks
) -> TreeModel:
    """Every rule over one settled example; ``left`` is each live session's mailbox size."""
    model = TreeModel(journal, records, checks)
    model.cascades = derive_cascades(model)
    check_direct_ops(model)
    check_calls(model)
    check_cascades(model)
    check_histories(model, left)
    check_messages(model)
    check_causes(model)
    return model


def check_direct_ops(model: TreeModel) -> None:
    for op in model.journal.ops:
        allowed = _allowed(model, op)
        detail = f"{op.verb} -> {op.outcome}, expected one of {sorted(allowed)}"
        model.checks.expect(op.outcome in allowed, "direct_answer", op.target, detail)
        if op.created is not None:
            born = model.created.get(op.created)
            ok = born is not None and born[1].parent_id == op.target
            model.checks.expect(ok, "start_parent", op.target, op.created)


def _allowed(model: TreeModel, op: DirectOp) -> set[str]:
    target = op.target
    if not ids.is_safe_session_id(target):
        return {"invalid"}
    if model.created_at(target) > op.end or model.gone_by(target, ("delete",)) < op.start:
        return {"not_found"}
    maybe_deleted = {"not_found"} if model.maybe_gone_from(target, ("delete",)) < op.end else set()
    if model.gone_by(target) < op.start:
        return ON_ARCHIVED[op.verb] | maybe_deleted
    stopping = (
        {"unavailable"}
        if op.verb == "start_child" and model.cascading(target, op.start, op.end)
        else set()
    )
    if model.maybe_gone_from(target) > op.end:
        return SUCCESS[op.verb] | stopping
    return SUCCESS[op.verb] | ON_ARCHIVED[op.verb] | maybe_deleted


def check_cascades(model: TreeModel) -> None:
    expect = model.checks.expect
    for sid, (born, made) in model.created.items():
        parent = ids.parent_of(sid)
        expect(made.parent_id == parent, "parent_mismatch", sid, str(made.parent_id))
        if parent is not None:
            expect(model.gone_by(parent) >= born, "created_under_gone", sid, parent, parent)
    for cascade in model.cascades:
        if cascade.end is None:
            continue
        for sid in model.created:
            born = model.created_at(sid)
            if born < cascade.end and cascade.covers(sid) and not _covered(model, sid, cascade):
                new = born > cascade.start
                if new:  # a child started during the cascade escaped it
                    model.escaped.add(sid)
                rule = ESCAPED if new else "cascade_missed"
                expect(False, rule, sid, f"{cascade.how} of {cascade.target}", cascade.target)
            else:
                model.checks.count += 1


def _covered(model: TreeModel, sid: str, cascade: Cascade) -> bool:
    """Once the cascade returned, the session is archived (deleted), or it was stopped or
    archived while a stop ran (or had been archived before)."""
    assert cascade.end is not None
    if cascade.how == "delete":
        return model.first(sid, "deleted") <= cascade.end
    if cascade.how == "archive":
        return model.first(sid, "archived") <= cascade.end
    return model.first(sid, "archived") <= cascade.start or any(
        cascade.start < r.seq <= cascade.end and kind_of(r.event) in CAUSES for r in model.of[sid]
    )


def check_histories(model: TreeModel, left: Mapping[str, int]) -> None:
    expect = model.checks.expect
    for sid, records in model.of.items():
        expect(sid in model.created, "records_without_creation", sid, "")
        kinds = [kind_of(r.event) for r in records]
        for gone, allowed in (("archived", AFTER_ARCHIVE), ("deleted", frozenset())):
            after = set(kinds[kinds.index(gone) + 1 :]) - allowed if gone in kinds else set()
            # A delivery that passed its check before the archive, landed after it.
            rule = LATE_DELIVERY if after and after <= LATE_KINDS else f"revived_after_{gone}"
            expect(not after, rule, sid, f"{sorted(after)} after {gone}")
        resumes = [
            r.seq for r in records if isinstance(r.event, RoundStarted) and r.event.kind == "resume"
        ]
        expect(not resumes, "resume_without_kick", sid, str(resumes))
        _check_restart_after_stop(model, sid, records)
        queued, taken = mailbox_accounting(records)
        remaining = left.get(sid, 0)
        detail = f"{queued} queued, {taken} drained/folded/discarded, {remaining} left"
        expect(queued == taken + remaining, "message_lost", sid, detail)


def _check_restart_after_stop(model: TreeModel, sid: str, records: list[Record]) -> None:
    """After ``stopped`` the next round must open a run on a message that arrived since."""
    stopped_at: int | None = None
    for record in records:
        kind = kind_of(record.event)
        if kind == "stopped":
            stopped_at = record.seq
        elif isinstance(record.event, RoundStarted) and stopped_at is not None:
            event = record.event
            ok = event.kind == "opening" and event.drained >= 1
            detail = f"round {event.kind} draining {event.drained} after the stop at {stopped_at}"
            model.checks.expect(ok, "resumed_without_message", sid, detail)
            stopped_at = None


def check_messages(model: TreeModel) -> None:
    """Queued messages per (session, sender) between what surely and what maybe was sent."""
    low: Counter[tuple[str, str | None]] = Counter()
    high: Counter[tuple[str, str | None]] = Counter()

    def sent(key: tuple[str, str | None], surely: bool) -> None:
        high[key] += 1
        low[key] += surely

    explained: set[str] = set()
    for op in model.journal.ops:
        if op.verb in ("send", "interrupt") and op.outcome in ("started", "queued"):
            sent((op.target, None), True)
        if op.created is not None:
            explained.add(op.created)
            sent((op.created, op.target), True)
    explained |= _tool_messages(model, sent)
    for sid, (_, made) in model.created.items():
        if made.parent_id is not None and sid not in explained:  # a start_session cut midway
            sent((sid, made.parent_id), False)
    for record in model.records:
        if isinstance(record.event, ReportSent):
            sent((record.event.to_session_id, record.session_id), False)
    got = Counter(
        (r.session_id, r.event.source_session_id)
        for r in model.records
        if isinstance(r.event, MessageQueued)
    )
    for key in sorted(set(got) | set(high), key=str):
        detail = f"from {key[1]}: {got[key]} queued, expected {low[key]}..{high[key]}"
        model.checks.expect(low[key] <= got[key] <= high[key], "message_count", key[0], detail)
        session_id, source = key
        if source is not None:
            ok = ids.same_tree(session_id, source)
            model.checks.expect(ok, "foreign_message", session_id, source)


def _tool_messages(model: TreeModel, sent: Sent) -> set[str]:
    """Count the messages session tool calls delivered; returns the children they started."""
    started: set[str] = set()
    for call_id, call in model.calls.items():
        planned = model.journal.planned.get(call_id)
        if planned is None or not call.results:
            continue
        text = call.results[0][1].result
        cut, answer = text in CUT_RESULTS, parse(text) or {}
        if planned.tool == "start_session" and answer.get("code") == 0:
            child = str(answer.get("sessionId"))
            started.add(child)
            sent((child, call.caller), True)
        target = planned.target or ""
        delivers = planned.tool == "interrupt_session" or (
            planned.tool == "query_session" and target != call.caller
        )
        if delivers and (answer.get("code") == 0 or (cut and _same_tree_safe(call.caller, target))):
            sent((target, call.caller), not cut)
    return started


def _same_tree_safe(caller: str, target: str) -> bool:
    return ids.is_safe_session_id(target) and ids.same_tree(caller, target)


def check_causes(model: TreeModel) -> None:
    """Each stopped/archived/deleted record follows the start of a cascade covering it."""
    for record in model.records:
        kind = kind_of(record.event)
        hows = CAUSES.get(kind) or (("delete",) if kind == "deleted" else None)
        if hows is None:
            continue
        sid = record.session_id
        cause = any(
            c.how in hows and c.covers(sid) and c.start < record.seq for c in model.cascades
        )
        model.checks.expect(cause, f"{kind}_without_cause", sid, f"seq {record.seq}")


__all__ = ["NEVER", "check_example"]
