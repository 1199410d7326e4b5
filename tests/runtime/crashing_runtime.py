"""A runtime that runs one shell command, then waits to be killed.

Usage: ``python tests/runtime/crashing_runtime.py WORKSPACE COMMAND``

Opens the embedded runtime on ``WORKSPACE`` (its SQLite log), sends a new session a
message whose turn runs ``COMMAND`` with ``shell_exec``, prints ``started <pgid>``
(flushed) once the log holds the command's process group, then waits for the test to
SIGKILL it. It exits by itself after ``LIFETIME`` seconds (ending its command as a
runtime does), so it never outlives a failed test for long.
"""

from __future__ import annotations

import sys

import trio

from halo_actors.agent.scripted import Rule, Script, ScriptedCall, ScriptedModel, Step
from halo_actors.core.events import CommandStarted
from halo_actors.core.log import EventFilter
from halo_actors.runtime.embed import open_runtime

LIFETIME = 30.0


async def main(workspace: str, command: str) -> None:
    run = ScriptedCall(name="shell_exec", input={"command": command})
    model = ScriptedModel({"default": Script(rules=(Rule(steps=(Step(calls=(run,)),)),))})
    with trio.move_on_after(LIFETIME):
        async with open_runtime(workspace, model=model) as sup:
            sid = await sup.create_session(namespace="cli")
            async with sup.log.subscribe(EventFilter(session_id=sid)) as records:
                await sup.send(sid, "run it")
                async for record in records:
                    if isinstance(record.event, CommandStarted):
                        sys.stdout.write(f"started {record.event.pgid}\n")
                        sys.stdout.flush()
                        break
            await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
