"""``python -m halo_actors watch`` and ``python -m halo_actors history``: parsing and wiring.

- ``watch --url URL --token T [SESSION] [--plain]``: the live tree view of a remote
  server's session tree (the newest of the token's sessions when none is named).
  On a terminal the rich view, else (or with ``--plain``) one line per event. Runs
  until Ctrl-C (exit 0); a refusal by the server exits 2 with its message.
  ``--token`` may come from ``$HALO_ACTORS_TOKEN`` instead (it then stays out of the
  process list).
- ``history --workspace DIR [SESSION] [--json]``: the workspace's sessions, or one
  session's tree and transcript, read from its log with no server.

Importing this module is cheap: the work is imported when a command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
from pathlib import Path

COMMANDS = ("watch", "history")
TOKEN_ENV = "HALO_ACTORS_TOKEN"
TICK = 0.2
"""Seconds between redraws of the live view."""


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    watch = commands.add_parser(
        "watch",
        help="watch a server's session tree live (WebSocket; reconnects on drops)",
        description="The live tree view of a remote session tree, over the WebSocket.",
    )
    watch.add_argument("session", nargs="?", help="any session of the tree (default: newest)")
    watch.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:9527")
    watch.add_argument("--token", help=f"an access token (default: ${TOKEN_ENV})")
    watch.add_argument("--plain", action="store_true", help="one line per event, no live view")

    history = commands.add_parser(
        "history",
        help="read a workspace's event log offline: sessions, a tree, a transcript",
        description="A workspace's sessions, or one session's tree and transcript.",
    )
    history.add_argument("session", nargs="?", help="a session to show (default: list them)")
    history.add_argument("--workspace", required=True, help="the workspace directory")
    history.add_argument("--json", action="store_true", help="one JSON document")


def run(args: argparse.Namespace) -> int:
    try:
        return _watch(args) if args.command == "watch" else _history(args)
    except* BrokenPipeError:  # the reader went away (``| head``): a normal end
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _watch(args: argparse.Namespace) -> int:
    import trio

    from .remote import WatchRefused, http_base

    token = args.token or os.environ.get(TOKEN_ENV, "")
    if not token:
        return _fail(f"a token is needed: --token, or ${TOKEN_ENV}")
    try:
        base = http_base(args.url)
        live = sys.stdout.isatty() and not args.plain
        trio.run(_watch_until_interrupted, base, token, args.session, live)
    except WatchRefused as exc:
        return _fail(str(exc))
    return 0


async def _watch_until_interrupted(base: str, token: str, session: str | None, live: bool) -> None:
    import trio

    from .remote import WatchRefused, follow, newest_session
    from .screen import LiveWatch, PlainWatch

    session_id = session or await newest_session(base, token)
    refused: WatchRefused | None = None
    view = LiveWatch(sys.stdout, f"watch {session_id}") if live else PlainWatch(sys.stdout)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals, view:
        async with trio.open_nursery() as nursery:

            async def until_signalled() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()

            async def redraw() -> None:
                while True:
                    view.tick()
                    await trio.sleep(TICK)

            async def watch() -> None:
                nonlocal refused
                try:
                    await follow(base, token, session_id, view)
                except WatchRefused as exc:
                    refused = exc
                    nursery.cancel_scope.cancel()

            nursery.start_soon(until_signalled)
            nursery.start_soon(redraw)
            nursery.start_soon(watch)
    if refused is not None:
        raise refused


def _history(args: argparse.Namespace) -> int:
    import trio

    from . import history

    workspace = Path(args.workspace).resolve()
    width = shutil.get_terminal_size().columns
    try:
        states = trio.run(history.load, workspace)
        if args.json:
            doc = (
                history.session_json(states, args.session)
                if args.session
                else history.list_json(workspace, states)
            )
            print(json.dumps(doc, indent=2))
            return 0
        lines = (
            history.session_text(states, args.session, width)
            if args.session
            else history.list_text(states, width)
        )
    except history.HistoryError as exc:
        return _fail(str(exc))
    print("\n".join(lines))
    return 0
