"""The built-in ``default`` agent's script: something a person can talk to without a model.

- ``count to N`` streams N numbered chunks at a steady pace (long enough to cancel);
- ``run <command>`` calls ``shell_exec`` and then reports;
- ``spawn N <task>`` starts N sub-sessions that report back;
- a report from a sub-session is acknowledged; a resume kick says so;
- anything else gets a short streamed reply.
"""

from __future__ import annotations

import re

from .scripted import Rule, Script, ScriptedCall, Step

COUNT_PACE = 0.25
"""Seconds between numbered chunks of ``count to N``."""
MAX_COUNT = 1_000
MAX_SPAWN = 20


def _paced_count(n: int) -> Step:
    """One delta per number, ``COUNT_PACE`` seconds apart (numbers padded to one width)."""
    width = len(str(n)) + 1
    return Step(
        text="".join(f"{i}\n".rjust(width) for i in range(1, n + 1)), chunk=width, delay=COUNT_PACE
    )


def _run(found: re.Match[str]) -> tuple[Step, ...]:
    command = found.group(1).strip()
    return (
        Step(
            text=f"Running `{command}`.\n",
            calls=(ScriptedCall(name="shell_exec", input={"command": command}),),
        ),
        Step(text="The command finished; its output is above."),
    )


def _spawn(found: re.Match[str]) -> tuple[Step, ...]:
    n = max(1, min(int(found.group(1)), MAX_SPAWN))
    task = found.group(2).strip()
    calls = tuple(
        ScriptedCall(
            name="start_session", input={"task": f"{task} (part {i} of {n})", "label": f"worker{i}"}
        )
        for i in range(1, n + 1)
    )
    return (
        Step(text=f"Starting {n} sub-session{'s' if n > 1 else ''}.\n", calls=calls),
        Step(text="They will report back when done."),
    )


_FROM = re.compile(r"^\(from: session [^)]+\) ")


def _echo(found: re.Match[str]) -> tuple[Step, ...]:
    lines = found.group(0).strip().splitlines()
    said = _FROM.sub("", lines[-1])[:200] if lines else ""
    return (Step(text=f"Done: {said}" if said else "Hello!", chunk=8),)


DEMO_SCRIPT = Script(
    rules=(
        Rule(kind="resume", steps=(Step(text="Resuming the task after the interrupt."),)),
        Rule(
            match=r"^\(from: session [^)]+\) \[Final report",
            build=lambda m: (Step(text="Received the sub-session report."),),
        ),
        Rule(
            match=r"^\(from: session [^)]+\) \[Interim report",
            steps=(Step(text="Noted the interim report."),),
        ),
        Rule(
            match=r"(?i)^\s*count to (\d{1,4})\s*$",
            build=lambda m: (_paced_count(min(int(m.group(1)), MAX_COUNT)),),
        ),
        Rule(match=r"(?is)^\s*run (.+)$", build=_run),
        Rule(match=r"(?is)^\s*spawn (\d{1,2}) (.+)$", build=_spawn),
        Rule(match=r"(?s).*", build=_echo),
    )
)
