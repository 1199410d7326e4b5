"""hard-interrupt: ``interrupt_session`` cuts a child's ``sleep 60 && echo done`` at once.

The runner runs a parallel batch: the long command and a quick one. The quick
result lands; then the lead (told by the user) calls ``interrupt_session`` on
the runner. The runner's turn is cancelled now: the long command's whole
process group dies, the cut call gets the do-not-retry marker, the lead's
message drains on the same wake-up, and the runner calls ``continue_task``,
which gives it one resume turn to finish the job.
"""

from __future__ import annotations

import re
from pathlib import Path

import trio

from ...agent.repair import INTERRUPTED_RESULT, UI_INTERRUPTED
from ...agent.scripted import Rule, Script, ScriptedModel, Step
from ...core.events import Record, RoundStarted, SessionCreated, ToolCalled, ToolReturned
from ...runtime.profiles import Profiles
from ...tools.shell import process_group_alive
from ..scenario import Scenario
from ..stage import DemoStuck, Stage
from .common import FROM_SESSION, call, profile, shell, start

PID_FILE = "long.pid"
LONG = f"echo $$ > {PID_FILE}; sleep 60 && echo done"
QUICK = "echo quick step ok"
RESUMED = "Resumed: the nightly job is finished, without the long step."


def _interrupt(found: re.Match[str]) -> tuple[Step, ...]:
    message = "Skip the long step; finish the job with what you have."
    return (
        Step(
            text="Interrupting the runner.\n",
            calls=(call("interrupt_session", session_id=found.group(1), message=message),),
        ),
        Step(text="Told the runner to skip the long step."),
    )


LEAD = Script(
    rules=(
        Rule(
            match="start the nightly job",
            steps=(
                Step(calls=(start("run the nightly job", agent="runner", label="runner"),)),
                Step(text="A runner is on the nightly job."),
            ),
        ),
        Rule(match=r"interrupt (\S+)", build=_interrupt),
        Rule(match=FROM_SESSION, steps=(Step(text="Noted the runner's report."),)),
    )
)
RUNNER = Script(
    rules=(
        Rule(kind="resume", steps=(Step(text=RESUMED, chunk=12),)),
        Rule(
            resumed=True,
            steps=(
                Step(text="Interrupted: dropping the long step.\n", calls=(call("continue_task"),)),
                Step(text="I finish the rest in a fresh turn."),
            ),
        ),
        Rule(
            match="run the nightly job",
            steps=(
                Step(text="Running both steps in parallel.\n", calls=(shell(LONG), shell(QUICK))),
                Step(text="Both steps finished."),
            ),
        ),
    )
)
PROFILES = Profiles(
    {
        "lead": profile("lead", "runner", description="hands out jobs"),
        "runner": profile("runner", description="runs long jobs"),
    }
)


async def _read_pgid(path: Path) -> int:
    """The long command writes its pid (= its process group) first thing; poll the file."""
    pid_file = trio.Path(path)
    for _ in range(500):  # 10 s at most
        if await pid_file.exists() and (text := (await pid_file.read_text()).strip()):
            return int(text)
        await trio.sleep(0.02)
    raise DemoStuck(f"{path.name} was never written")


async def play(stage: Stage) -> None:
    model = ScriptedModel({"lead": LEAD, "runner": RUNNER})
    async with stage.runtime(model, PROFILES) as sup:
        lead = await sup.create_session(namespace="demo", agent_id="lead", title="lead")
        await stage.note("the user asks the lead for the nightly job; it starts a runner")
        await sup.send(lead, "start the nightly job")
        created = await stage.wait_record(
            "the runner", lambda r: isinstance(r.event, SessionCreated) and r.session_id != lead
        )
        runner = created.session_id
        await stage.wait_event(runner, ToolReturned, what="the quick command's result")
        pgid = await _read_pgid(stage.workspace / PID_FILE)
        await stage.snapshot("the runner, still in `sleep 60`", sup.sessions())
        await stage.note(f"the user tells the lead the long step is not needed (group {pgid})")
        began = trio.current_time()
        await sup.send(lead, f"the long step is not needed: interrupt {runner}")
        await stage.wait_event(runner, ToolReturned, lambda e: e.ui_result == UI_INTERRUPTED)
        took = trio.current_time() - began
        await stage.check(
            f"process group {pgid} of `sleep 60` died {took:.2f} s after the interrupt",
            not process_group_alive(pgid) and took < 5,
        )
        await stage.wait_idle(sup, lead)
        await _check(stage, await stage.records(runner))


async def _check(stage: Stage, records: list[Record]) -> None:
    events = [r.event for r in records]
    results = {e.tool_use_id: e for e in events if isinstance(e, ToolReturned)}
    calls = {
        e.tool_input.get("command"): e.tool_use_id for e in events if isinstance(e, ToolCalled)
    }
    quick, cut = results.get(calls.get(QUICK, "")), results.get(calls.get(LONG, ""))
    await stage.check(
        "the finished call of the batch landed",
        quick is not None and "quick step ok" in quick.result,
    )
    await stage.check(
        "the cut call is marked: [interrupted by user], and do-not-retry for the model",
        cut is not None and cut.ui_result == UI_INTERRUPTED and cut.result == INTERRUPTED_RESULT,
    )
    rounds = [e for e in events if isinstance(e, RoundStarted)]
    await stage.check(
        "the lead's message drained with resumed_after_interrupt set",
        any(r.kind == "drained" and r.resumed_after_interrupt for r in rounds),
    )
    kicked = [e for e in events if isinstance(e, ToolReturned) and e.tool_name == "continue_task"]
    await stage.check(
        "continue_task armed a resume turn, which finished the job",
        bool(kicked) and kicked[0].result.startswith("ok") and rounds[-1].kind == "resume",
    )


SCENARIO = Scenario(
    name="hard-interrupt",
    title="interrupt_session kills a running `sleep 60 && echo done`; the child resumes",
    play=play,
    shown=(
        "interrupt_session (a lead's tool call) aborted the runner's turn at once",
        "the shell command died as a whole process group, not just its `sh` leader",
        "the quick call of the same parallel batch kept its result",
        "the cut call got [interrupted by user] (person) and a do-not-retry marker (model)",
        "continue_task armed exactly one resume turn, and the runner finished its job",
    ),
    docs=("docs/design/actors.md (Interrupt tiers, continue_task)", "docs/design/turns.md"),
)
