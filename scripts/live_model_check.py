"""Check a real model set-up: one tool-using turn against the provider a spec names.

The agent is asked to run ``echo halo-live-check`` with ``shell_exec`` and to answer
with what it printed. Prints each step, the usage and the measured context; exits 0
when the model called the tool and answered with its output, 1 otherwise. Without a
key for an official host it says so and exits 0 (skipped), so it is safe in any CI.

    ANTHROPIC_API_KEY=... python scripts/live_model_check.py anthropic:claude-sonnet-4-5
    OPENAI_BASE_URL=http://127.0.0.1:11434/v1 python scripts/live_model_check.py openai:qwen2.5-coder:7b
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import trio

from halo_actors import (
    AgentProfile,
    AssistantReplied,
    ContextMeasured,
    ErrorRaised,
    EventFilter,
    Message,
    ModelConfigError,
    Profiles,
    ToolCalled,
    ToolReturned,
    UsageReported,
    open_runtime,
)

MARKER = "halo-live-check"
SYSTEM = (
    "You are checking that a tool set-up works. Call the shell_exec tool exactly once to "
    f"run `echo {MARKER}`, then reply with exactly what the command printed."
)
BUDGET = 180.0


async def check(spec: str) -> int:
    profile = AgentProfile(name="default", system=SYSTEM, tools=("shell_exec",), team=())
    with tempfile.TemporaryDirectory() as workspace:
        try:
            runtime = open_runtime(workspace, model=spec, profiles=Profiles({"default": profile}))
            async with runtime as sup:
                sid = await sup.create_session()
                await sup.send(sid, f"Run `echo {MARKER}` and tell me what it printed.")
                with trio.move_on_after(BUDGET) as waited:
                    await sup.wait_idle(sid)
                events = [r.event for r in await sup.log.read(EventFilter(session_id=sid))]
        except ModelConfigError as exc:
            print(f"skipped: {exc}")
            return 0
    if waited.cancelled_caught:
        print(f"failed: no answer within {BUDGET:g} s")
    return report(events)


def report(events: list[object]) -> int:
    called = returned = answered = False
    for event in events:
        match event:
            case ToolCalled(tool_name=name, tool_input=tool_input):
                print(f"tool call   {name} {tool_input}")
                called = name == "shell_exec"
            case ToolReturned(result=result):
                print(f"tool result {result.strip()!r}")
                returned = MARKER in result
            case AssistantReplied() as reply:
                text = Message(role="assistant", content=reply.content).text()
                if text:
                    print(f"answer      {text.strip()!r}")
                    answered = answered or MARKER in text
            case UsageReported() as usage:
                print(
                    f"usage       input {usage.input_tokens}, output {usage.output_tokens}, "
                    f"cache read {usage.cache_read_tokens}, cache write {usage.cache_write_tokens}"
                )
            case ContextMeasured(tokens=tokens, max_tokens=window):
                print(f"context     {tokens} of {window} tokens")
            case ErrorRaised(error=error):
                print(f"error       {error}")
    ok = called and returned and answered
    print("ok: the model called the tool and answered with its output" if ok else "failed")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "spec",
        nargs="?",
        default=os.environ.get("HALO_MODEL"),
        help="e.g. anthropic:claude-sonnet-4-5",
    )
    args = parser.parse_args()
    if not args.spec:
        print("skipped: name a model (anthropic:<model> or openai:<model>) or set HALO_MODEL")
        return 0
    return trio.run(check, args.spec)


if __name__ == "__main__":
    sys.exit(main())
