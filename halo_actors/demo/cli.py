"""The ``demo`` subcommand's arguments and its wiring to :func:`.tour.run_demo`.

``python -m halo_actors demo [NAME ...] [--list] [--plain | --json] [--workspace DIR]
[--speed F]``. With no output flag, the live (rich) view is used when stdout is a
terminal and plain lines otherwise. Importing this module is cheap: the tour and
its dependencies load only when the subcommand runs.
"""

from __future__ import annotations

import argparse
import sys


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="play the demo scenarios (all of them: the tour)",
        description="Scripted session trees with real shell commands, on the embedded runtime.",
    )
    demo.add_argument("scenario", nargs="*", help="scenarios to play (default: the whole tour)")
    demo.add_argument("--list", action="store_true", help="list the scenarios and exit")
    demo.add_argument("--workspace", help="root directory of the scenario workspaces (kept)")
    output = demo.add_mutually_exclusive_group()
    output.add_argument("--plain", action="store_true", help="plain lines (default off a TTY)")
    output.add_argument("--json", action="store_true", help="every event as a JSON line")
    demo.add_argument(
        "--speed", type=float, default=1.0, help="pacing factor: 0.5 plays twice as fast"
    )


def run(args: argparse.Namespace) -> int:
    from .tour import Mode, list_scenarios, run_demo

    if args.list:
        list_scenarios(sys.stdout)
        return 0
    if not args.speed > 0:
        sys.stderr.write("--speed must be > 0\n")
        return 2
    mode: Mode = (
        "json" if args.json else "plain" if args.plain or not sys.stdout.isatty() else "live"
    )
    return run_demo(args.scenario, workspace=args.workspace, mode=mode, speed=args.speed)
