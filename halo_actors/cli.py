"""Command line: ``python -m halo_actors <command>``; parsing and wiring only."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from . import __version__
from .demo import cli as demo_cli
from .fronts.acp import cli as acp_cli
from .fronts.http import cli as http_cli
from .logging import configure_logging
from .watch import cli as watch_cli

DESCRIPTION = (
    "halo_actors: an event-sourced actor runtime for trees of AI-agent sessions. "
    "Play the demo, serve the HTTP front, manage its tokens, or bridge an editor over ACP."
)
VERBOSE_COMMANDS = ("serve",)
"""Commands whose runtime logs (stderr) include info lines by default."""


def program_name(argv0: str | None = None) -> str:
    """``halo-actors`` for the console script, ``python -m halo_actors`` otherwise."""
    name = os.path.basename(argv0 if argv0 is not None else sys.argv[0])
    return "halo-actors" if name == "halo-actors" else "python -m halo_actors"


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog or program_name(), description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-format",
        choices=("console", "json"),
        default="console",
        help="how runtime logs (stderr) are written (default: console)",
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help="the least severe runtime log written (default: info for serve, else warning)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo_cli.add_command(commands)
    http_cli.add_commands(commands)
    acp_cli.add_command(commands)
    watch_cli.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = args.log_level or ("info" if args.command in VERBOSE_COMMANDS else "warning")
    configure_logging(args.log_format, getattr(logging, level.upper()))
    if args.command == "demo":
        return demo_cli.run(args)
    if args.command in ("serve", "token"):
        return http_cli.run(args)
    if args.command == "acp":
        return acp_cli.run(args)
    if args.command in watch_cli.COMMANDS:
        return watch_cli.run(args)
    return 2
