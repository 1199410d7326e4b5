"""Suite 2, kill -9 mid-write: SIGKILL a loaded server at seeded moments and restart it.

After the run, against the final log (read read-only) and a snapshot taken right
after each kill: every frame a client received is in the log as shown; seqs are
strictly increasing, the prefix a kill left is never rewritten and numbering goes
on above it; every turn a kill cut is closed by an ``error`` saying the runtime
restarted, then a terminal ``complete``; acknowledged messages are logged and
drained into rounds (none lost, none discarded); every stream a client resumed with
``Last-Event-ID`` has no gap and no duplicate. See ``kill_harness``.

Rerun one seed with ``HALO_CHAOS_SEED=<seed>``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from chaos_scale import FULL, TallyBook, scale, seeds
from http_chaos import Chain, Connection, LogIndex, Payload, check_chain
from kill_harness import KillPlan, closing_problem, run_kills

from halo_actors.core.events import (
    AgentDone,
    ErrorRaised,
    Event,
    Record,
    RoundStarted,
    TextStreamed,
    TurnCompleted,
)

SUITE = "kill -9 mid-write"


@pytest.mark.parametrize("seed", seeds(2000, 1, 10))
async def test_sigkill_mid_write_loses_nothing_a_client_saw(
    seed: int, tmp_path: Path, chaos_tally: type[TallyBook]
) -> None:
    plan = KillPlan(
        seed,
        kills=scale(3, 20),  # full size: 10 seeds x 20 = 200 kills
        sessions=scale(3, 6),
        subscribers=scale(1, 2),
        life=(0.5, 2.5) if FULL else (0.4, 1.5),
    )
    tally = chaos_tally.suite(SUITE)
    with trio.fail_after(scale(45, 300)):
        run = await run_kills(plan, tmp_path)
    tally.runs += 1
    tally.faults += len(run.snapshots) + run.figures.get("kills during a restart", 0)
    tally.checks += run.checks
    print(
        f"seed {seed}: {run.checks} checks; "
        + ", ".join(f"{k} {v}" for k, v in run.figures.items())
    )
    if run.problems:
        tally.failures.append(f"seed {seed}: {run.problems[0]} (+{len(run.problems) - 1} more)")
    assert not run.problems, f"HALO_CHAOS_SEED={seed}: " + "\n".join(run.problems[:20])


def _records() -> list[Record]:
    events: list[Event] = [
        RoundStarted(text="count to 2", drained=1),
        TextStreamed(text="1\n"),
        TextStreamed(text="2\n"),
        TurnCompleted(),
        AgentDone(),
    ]
    return [Record(seq=10 + i, session_id="s", ts=1, event=e) for i, e in enumerate(events)]


def _chain(*connections: tuple[int | None, int, list[tuple[int, Payload]]]) -> Chain:
    chain = Chain("s", "subscriber")
    for sent_after, cursor, frames in connections:
        chain.connections.append(Connection(sent_after, cursor, list(frames), "complete"))
    return chain


USER: Payload = {"type": "user", "text": "count to 2"}
ONE: Payload = {"type": "stream", "text": "1\n"}
TWO: Payload = {"type": "stream", "text": "2\n"}
DONE: Payload = {"type": "complete"}


@pytest.mark.parametrize(
    ("case", "chain", "problem"),
    [
        ("whole", _chain((None, 9, [(10, USER), (11, ONE), (12, TWO), (13, DONE)])), None),
        (
            "resumed",
            _chain((None, 9, [(10, USER), (11, ONE)]), (11, 11, [(12, TWO), (13, DONE)])),
            None,
        ),
        ("gap", _chain((None, 9, [(10, USER), (12, TWO), (13, DONE)])), "gap"),
        (
            "duplicate",
            _chain((None, 9, [(10, USER), (11, ONE)]), (10, 10, [(11, ONE), (12, TWO)])),
            "duplicate",
        ),
        ("rewritten", _chain((None, 9, [(10, USER), (11, TWO)])), "not in the log"),
        ("moved", _chain((None, 9, [(10, USER)]), (10, 11, [(12, TWO)])), "resumed after 10"),
    ],
)
def test_the_stream_checks_catch_what_they_claim_to(
    case: str, chain: Chain, problem: str | None
) -> None:
    report = check_chain(chain, LogIndex(_records()))
    if problem is None:
        assert report.problems == [], case
    else:
        assert any(problem in p for p in report.problems), (case, report.problems)


def test_a_cut_turn_must_be_closed_by_the_restart_error_then_complete() -> None:
    def rec(*events: Event) -> list[Record]:
        return [Record(seq=i, session_id="s", ts=1, event=e) for i, e in enumerate(events)]

    error = ErrorRaised(error="the runtime restarted while this turn ran; it was cut short")
    assert closing_problem(rec(error, TurnCompleted(), AgentDone())) is None
    assert closing_problem(rec(TurnCompleted(), AgentDone())) is not None
    assert closing_problem(rec(error, RoundStarted(text="x"))) is not None
    assert closing_problem(rec(ErrorRaised(error="boom"), TurnCompleted())) is not None
