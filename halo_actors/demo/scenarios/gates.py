"""gates: a sub-session tries to stop its own ancestor and to reach into a foreign tree.

Two users' trees share one runtime: alice's and bob's. Alice's prober (a
sub-session) calls, in one batch, ``stop_session`` on alice (its parent),
``query_session`` and ``get_session_output`` on bob, and ``query_session`` on an
id that does not exist. Every call is refused at the tool layer; the foreign
session is refused with the very bytes an unknown one gets, so nothing leaks.
"""

from __future__ import annotations

import re

from ...agent.scripted import Rule, Script, ScriptedModel, Step
from ...core.events import MessageQueued, Record, SessionStopped, ToolCalled, ToolReturned
from ...runtime.profiles import Profiles
from ..scenario import Scenario
from ..stage import Stage
from .common import FROM_SESSION, call, profile, start

GHOST = "carol_0_00000000"
"""A well-formed root id that no session has."""


def _probe(found: re.Match[str]) -> tuple[Step, ...]:
    parent, foreign = found.group(1), found.group(2)
    return (
        Step(
            text="Trying to reach outside my own subtree.\n",
            calls=(
                call("stop_session", session_id=parent),
                call("query_session", session_id=foreign, message="what are you working on?"),
                call("get_session_output", session_id=foreign),
                call("query_session", session_id=GHOST, message="hello?"),
            ),
        ),
        Step(text="Every attempt was refused."),
    )


def _delegate(found: re.Match[str]) -> tuple[Step, ...]:
    task = f"stop {found.group(1)} and read {found.group(2)}"
    return (
        Step(calls=(start(task, agent="prober", label="prober"),)),
        Step(text="My prober is on it."),
    )


OWNER = Script(
    rules=(
        Rule(match=FROM_SESSION, steps=(Step(text="Noted the prober's report."),)),
        Rule(match=r"probe the gates: (\S+) (\S+)", build=_delegate),
        Rule(steps=(Step(text="Working on my own things."),)),
    )
)
PROBER = Script(rules=(Rule(match=r"stop (\S+) and read (\S+)", build=_probe),))
PROFILES = Profiles(
    {
        "owner": profile("owner", "prober", description="a user's root agent"),
        "prober": profile("prober", description="tries the tree-scoped gates"),
    }
)


def expected(alice: str, bob: str) -> dict[str, str]:
    """The exact answers the session tools give, by what was tried."""
    return {
        "stop_session(alice)": (
            '{"code":1,"error":"cannot stop an ancestor of your session '
            f'({alice}): it would wait for this very turn"}}'
        ),
        "query_session(bob)": f'{{"code":1,"error":"session {bob} not found"}}',
        "get_session_output(bob)": f'{{"code":1,"error":"session {bob} not found"}}',
        "query_session(no such id)": f'{{"code":1,"error":"session {GHOST} not found"}}',
    }


async def play(stage: Stage) -> None:
    model = ScriptedModel({"owner": OWNER, "prober": PROBER})
    async with stage.runtime(model, PROFILES) as sup:
        alice = await sup.create_session(namespace="alice", agent_id="owner", title="alice")
        bob = await sup.create_session(namespace="bob", agent_id="owner", title="bob")
        await stage.note("two users' trees share one runtime: alice's and bob's")
        await sup.send(bob, "summarise my notes")
        await stage.wait_idle(sup, bob)
        await stage.note("alice's agent starts a prober that tries to escape its subtree")
        await sup.send(alice, f"probe the gates: {alice} {bob}")
        await stage.wait_idle(sup, alice)
        records = await stage.records()
        await _show_answers(stage, alice, bob, records)
        await stage.snapshot("both trees at the end", sup.sessions())
        await _check_untouched(stage, bob, records)


def _answers(records: list[Record]) -> list[tuple[str, str]]:
    """(tool call, result) pairs of the prober's batch, in call order."""
    calls = [r.event for r in records if isinstance(r.event, ToolCalled)]
    results = {r.event.tool_use_id: r.event for r in records if isinstance(r.event, ToolReturned)}
    named = ("stop_session(alice)", "query_session(bob)", "get_session_output(bob)")
    labels = (*named, "query_session(no such id)")
    probes = [c for c in calls if c.tool_name != "start_session"]
    return [
        (label, results[c.tool_use_id].result if c.tool_use_id in results else "")
        for label, c in zip(labels, probes, strict=False)
    ]


async def _show_answers(stage: Stage, alice: str, bob: str, records: list[Record]) -> None:
    want = expected(alice, bob)
    got = _answers(records)
    for label, answer in got:
        await stage.note(f"{label} →\n     {answer}")
    await stage.check(
        "stopping an ancestor is refused (its cascade would wait for this very turn)",
        dict(got).get("stop_session(alice)") == want["stop_session(alice)"],
    )
    await stage.check(
        "bob's session is refused with the exact 'not found' an unknown id gets",
        all(dict(got).get(k) == want[k] for k in list(want)[1:]),
    )


async def _check_untouched(stage: Stage, bob: str, records: list[Record]) -> None:
    to_bob = [r for r in records if r.session_id == bob and isinstance(r.event, MessageQueued)]
    stopped = [r for r in records if isinstance(r.event, SessionStopped)]
    await stage.check(
        "nothing reached bob's tree and nothing was stopped",
        len(to_bob) == 1 and not stopped,
    )


SCENARIO = Scenario(
    name="gates",
    title="a sub-session cannot stop its ancestor or reach a foreign tree",
    play=play,
    shown=(
        "the by-id session tools act only inside the caller's own tree",
        "a foreign session is refused with the same bytes as an id that does not exist",
        "stop/archive of one's own session or an ancestor is refused (it would deadlock)",
        "the gates sit in the tool layer; the supervisor's methods stay usable by trusted fronts",
    ),
    docs=("docs/design/gates.md", "halo_actors/tools/sessions.py"),
)
