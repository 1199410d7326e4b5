"""Suite 3: what every gated session tool call must answer (``docs/design/gates.md``).

For a call made by ``caller`` on ``target`` between seqs ``c`` (its ``tool_call``)
and ``r`` (its ``tool_result``), the model decides what the gate may have seen:

- **hidden**: another tree, an unsafe id, an id that never existed, or a session
  already gone (archived/deleted) by ``c`` → exactly ``{"code":1,"error":"session
  <id> not found"}``, byte for byte the same for all of them;
- **visible**: same tree, created, and not possibly gone before ``r`` → the tool's
  own answer (refusals of stop/archive on self or ancestors, of a query to self;
  ``code 0`` otherwise);
- **either**: an archive of the target raced the call → one of the two.

A call whose turn was cut (hard interrupt, stop, archive) has the do-not-retry or
not-run marker instead, which is allowed only if something could have cut it.
"""

from __future__ import annotations

import json

from tree_model import NEVER, Call, Cascade, TreeModel
from tree_program import PROFILES, TEAMS

from halo_actors.agent.repair import INTERRUPTED_RESULT, NOT_RUN_RESULT
from halo_actors.core import ids
from halo_actors.core.events import ToolReturned

CUT_RESULTS = (INTERRUPTED_RESULT, NOT_RUN_RESULT)
HALF_CREATED = "listed_before_created"
"""Rule: a listing shows no session whose creation is not logged by the end of the call."""


def compact(value: dict[str, object]) -> str:
    """JSON as the tools write it (no spaces, UTF-8 kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def not_found(target: str) -> str:
    return compact({"code": 1, "error": f"session {target} not found"})


def parse(text: str) -> dict[str, object] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def derive_cascades(model: TreeModel) -> list[Cascade]:
    """Every stop/archive/delete that ran (or, for a cut tool call, may have run)."""
    found = [
        Cascade(op.verb, op.target, op.start, op.end, None)
        for op in model.journal.ops
        if op.verb in ("stop", "archive", "delete") and not op.refused
    ]
    for call_id, call in model.calls.items():
        planned = model.journal.planned.get(call_id)
        if planned is None or planned.tool not in ("stop_session", "archive_session"):
            continue
        target, how = planned.target or "", planned.tool.removesuffix("_session")
        if not call.results or call.results[0][1].result in CUT_RESULTS:
            if _may_run(call.caller, target):
                found.append(Cascade(how, target, call.seq, None, call.caller))
        elif (parse(call.results[0][1].result) or {}).get("code") == 0:
            found.append(Cascade(how, target, call.seq, call.end, call.caller))
    return found


def _may_run(caller: str, target: str) -> bool:
    return (
        ids.is_safe_session_id(target)
        and ids.same_tree(caller, target)
        and not ids.is_self_or_ancestor(target, caller)
    )


def visibility(model: TreeModel, caller: str, target: str, c: int, r: int) -> str:
    """``hidden``, ``visible`` or ``either``: what the gate may have seen of ``target``."""
    if not ids.is_safe_session_id(target) or not ids.same_tree(target, caller):
        return "hidden"
    born = model.created_at(target)
    if born > r:
        return "hidden"  # it did not exist while the call ran
    if born > c:
        return "either"
    if model.gone_by(target) < c:
        return "hidden"
    return "visible" if model.maybe_gone_from(target) > r else "either"


def check_calls(model: TreeModel) -> None:
    for call_id, call in model.calls.items():
        planned = model.journal.planned.get(call_id)
        expect = model.checks.expect
        if not expect(planned is not None, "unplanned_call", call.caller, call_id):
            continue
        assert planned is not None
        expect(planned.caller == call.caller, "wrong_caller", call.caller, call_id)
        expect(call.called.tool_input == planned.arguments, "wrong_input", call.caller, call_id)
        if not expect(len(call.results) == 1, "results_per_call", call.caller, call_id):
            continue
        check_answer(model, call, planned.tool, planned.target or "")


def check_answer(model: TreeModel, call: Call, tool: str, target: str) -> None:
    expect, caller = model.checks.expect, call.caller
    answer = call.results[0][1]
    if answer.result in CUT_RESULTS:
        cause = any(hit < call.end for hit in model.hard_hits(caller))
        expect(cause, "cut_without_cause", caller, f"{tool} {call.called.tool_use_id}")
        return
    _check_no_leak(model, caller, target, answer.result)
    if tool == "start_session":
        _check_start(model, call, answer)
        return
    if tool == "list_sessions":
        _check_list(model, call, answer)
        return
    seen = visibility(model, caller, target, call.seq, call.end)
    hidden = answer.is_error and _is_not_found(target, answer.result)
    shown, why = _visible_answer(tool, caller, target, answer)
    ok = hidden if seen == "hidden" else shown if seen == "visible" else hidden or shown
    detail = f"{tool}({target!r}) seen {seen}: {answer.result[:160]} ({why})"
    expect(ok, "gate_answer", caller, detail, target)


def _is_not_found(target: str, text: str) -> bool:
    if ids.is_safe_session_id(target):
        return text == '{"code":1,"error":"session ' + target + ' not found"}'
    return parse(text) == {"code": 1, "error": f"session {target} not found"}


def _visible_answer(tool: str, caller: str, target: str, answer: ToolReturned) -> tuple[bool, str]:
    got = parse(answer.result)
    verb = tool.removesuffix("_session")
    if tool in ("stop_session", "archive_session") and ids.is_self_or_ancestor(target, caller):
        what = "your own session" if target == caller else "an ancestor of your session"
        error = f"cannot {verb} {what} ({target}): it would wait for this very turn"
        return answer.is_error and got == {"code": 1, "error": error}, "refusal expected"
    if tool == "query_session" and target == caller:
        expected = {"code": 1, "error": "cannot query your own session"}
        return answer.is_error and got == expected, "refusal expected"
    if got is None or answer.is_error or got.get("code") != 0 or got.get("sessionId") != target:
        return False, "code 0 expected"
    rest = {k: v for k, v in got.items() if k not in ("code", "sessionId")}
    match tool:
        case "query_session" | "interrupt_session":
            return rest in ({"status": "started"}, {"status": "queued"}), "a delivery"
        case "stop_session":
            return set(rest) == {"stopped"} and isinstance(rest["stopped"], bool), "stopped"
        case "archive_session":
            return rest == {"archived": True}, "archived"
        case _:
            return set(rest) == {"output"} and isinstance(rest["output"], str), "an output"


def _check_start(model: TreeModel, call: Call, answer: ToolReturned) -> None:
    expect, caller = model.checks.expect, call.caller
    agent = str(call.called.tool_input.get("agent"))
    made = model.created.get(caller)
    team = TEAMS.get(made[1].agent_id, ()) if made else ()
    if agent not in team:
        error = f"agent profile {agent!r} is not in your team"
        ok = answer.is_error and answer.result == compact({"code": 1, "error": error})
        expect(ok, "start_gate", caller, answer.result)
        return
    if PROFILES.get(agent) is None:
        ok = answer.is_error and answer.result.startswith(f"unknown agent profile {agent!r}; ")
        expect(ok, "start_unknown_profile", caller, answer.result)
        return
    got = parse(answer.result) or {}
    if got.get("code") == 1 and model.cascading(caller, call.seq, call.end):
        refused = {"code": 1, "error": f"session {caller} is being stopped"}
        expect(got == refused, "start_while_stopping", caller, answer.result[:160])
        return
    child = str(got.get("sessionId"))
    expect(got == {"code": 0, "sessionId": child, "status": "started"}, "start", caller, str(got))
    born = model.created.get(child)
    ok = born is not None and call.seq < born[0] < call.end and born[1].parent_id == caller
    expect(ok and ids.parent_of(child) == caller, "start_parent", caller, child, child)
    expect(born is not None and born[1].agent_id == agent, "start_agent", caller, child, child)


def _check_list(model: TreeModel, call: Call, answer: ToolReturned) -> None:
    expect, caller, c, r = model.checks.expect, call.caller, call.seq, call.end
    got = parse(answer.result) or {}
    rows = got.get("sessions")
    if not expect(
        got.get("code") == 0 and isinstance(rows, list), "list", caller, answer.result[:300]
    ):
        return
    assert isinstance(rows, list)
    listed = {str(row.get("sessionId")): row for row in rows if isinstance(row, dict)}
    expect(len(listed) == len(rows), "list_rows", caller, str(rows))
    for sid, row in listed.items():
        expect(ids.same_tree(sid, caller), "list_shows_foreign", caller, sid)
        if model.created_at(sid) > r:
            # A session may be created while the call runs, but not listed before its
            # creation is logged (registered but not yet, or never, in the log).
            model.checks.expect(False, HALF_CREATED, caller, f"{sid} listed as {row}", sid)
            continue
        expect(row.get("parentId") == ids.parent_of(sid), "list_parents", caller, str(row), sid)
        expect(model.gone_by(sid) >= c, "list_shows_hidden", caller, sid, sid)
    for sid in model.in_tree(ids.root_of(caller)):
        if model.created_at(sid) < c and model.maybe_gone_from(sid) > r:
            expect(sid in listed, "list_misses", caller, sid, sid)


def _check_no_leak(model: TreeModel, caller: str, target: str, text: str) -> None:
    shown = text.replace(target, "<target>") if target else text
    for root, tag in model.journal.tags.items():
        if not ids.same_tree(root, caller):
            leak = root in shown or tag in shown
            model.checks.expect(not leak, "foreign_leak", caller, f"{root} {tag} in {text[:160]}")


__all__ = ["NEVER", "check_calls", "derive_cascades", "not_found", "visibility"]
