"""soft-interrupt: two messages arrive while a command runs; one merged answer follows.

The builder runs ``sleep 1; echo built``. While it runs, the user sends two
messages: both are queued and the turn is asked to yield. It does so at the
batch boundary, after the command finished on its own (its output lands), and
the next round takes both messages at once: one merged answer, no markers.
"""

from __future__ import annotations

import re

import trio

from ...agent.scripted import Rule, Script, ScriptedModel, Step
from ...core.events import (
    AssistantReplied,
    MessageQueued,
    Record,
    RoundStarted,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
)
from ...runtime.profiles import Profiles
from ..scenario import Scenario
from ..stage import Stage
from .common import pace, profile, shell, text_of

ASKS = ("also run the linter, please", "and what version are we on?")


def _answer_all(found: re.Match[str]) -> tuple[Step, ...]:
    asks = [part.strip() for part in found.string.split("\n\n") if part.strip()]
    text = f"One answer for your {len(asks)} messages: " + " / ".join(f"«{a}»" for a in asks)
    return (Step(text=text + " — the linter is clean and we are on 0.1.0.", chunk=16),)


def _model(stage: Stage) -> ScriptedModel:
    builder = Script(
        rules=(
            Rule(
                match="build the project",
                steps=(
                    Step(
                        text="Building the project.\n",
                        calls=(shell(f"sleep {pace(stage.seconds(1.5))}; echo built"),),
                    ),
                    Step(text="The build finished."),
                ),
            ),
            Rule(kind="drained", build=_answer_all),
        )
    )
    return ScriptedModel({"builder": builder})


PROFILES = Profiles({"builder": profile("builder", description="builds and answers questions")})


async def play(stage: Stage) -> None:
    async with stage.runtime(_model(stage), PROFILES) as sup:
        builder = await sup.create_session(namespace="demo", agent_id="builder", title="builder")
        await stage.note("the user asks for a build; the builder runs a shell command")
        await sup.send(builder, "build the project")
        await stage.wait_event(builder, ToolCalled, what="the build command")
        for ask in ASKS:
            await trio.sleep(stage.seconds(0.3))
            await stage.note(f"while it runs, the user sends: {ask!r}")
            await sup.send(builder, ask)
        await stage.snapshot("the tree while the command runs", sup.sessions())
        await stage.wait_idle(sup, builder)
        await _check(stage, await stage.records(builder))


async def _check(stage: Stage, records: list[Record]) -> None:
    events = [r.event for r in records]
    calls = [r.seq for r in records if isinstance(r.event, ToolCalled)]
    results = [(r.seq, r.event) for r in records if isinstance(r.event, ToolReturned)]
    queued = [r.seq for r in records if isinstance(r.event, MessageQueued)][1:]
    await stage.check(
        "both messages were queued while the command ran",
        bool(calls and results)
        and len(queued) == 2
        and all(calls[0] < q < results[0][0] for q in queued),
    )
    output = results[0][1].result if results else ""
    await stage.check(
        "the command was not killed: its output landed",
        "built" in output and "[exit code 0]" in output,
    )
    completes = [e for e in events if isinstance(e, TurnCompleted)]
    await stage.check(
        "the first turn yielded at the batch boundary",
        bool(completes)
        and completes[0].batch_boundary
        and completes[0].stop_reason == "interrupted",
    )
    rounds = [e for e in events if isinstance(e, RoundStarted) and e.kind == "drained"]
    await stage.check(
        "one merged round took both messages",
        len(rounds) == 1 and rounds[0].drained == 2 and all(a in rounds[0].text for a in ASKS),
    )
    replies = [e for e in events if isinstance(e, AssistantReplied)]
    await stage.check(
        "one answer covers both", len(replies) == 2 and all(a in text_of(replies[-1]) for a in ASKS)
    )
    await stage.check(
        "the soft path left no interrupted markers",
        all(e.ui_result is None for e in events if isinstance(e, ToolReturned)),
    )


SCENARIO = Scenario(
    name="soft-interrupt",
    title="two messages during a turn get one merged answer; the running command finishes",
    play=play,
    shown=(
        "a message to a busy session is queued and asks the turn to yield (soft interrupt)",
        "the turn yields only at the batch boundary: the running command was not killed",
        "the next round took the whole mailbox at once: one merged answer for both messages",
        "the first turn's complete carried batch_boundary=true; the last one is terminal",
    ),
    docs=("docs/design/actors.md (Interrupt tiers, Rounds)", "docs/design/turns.md"),
)
