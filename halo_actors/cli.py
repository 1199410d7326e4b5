"""Command line: ``python -m halo_actors <command>``; parsing and wiring only."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .demo import cli as demo_cli
from .fronts.acp import cli as acp_cli
from .fronts.http import cli as http_cli
from .logging import configure_logging
from .watch import cli as watch_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m halo_actors", description=__doc__)
    parser.add_argument(
        "--log-format",
        choices=("console", "json"),
        default="console",
        help="how runtime logs (stderr) are written",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo_cli.add_command(commands)
    http_cli.add_commands(commands)
    acp_cli.add_command(commands)
    watch_cli.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_format)
    if args.command == "demo":
        return demo_cli.run(args)
    if args.command in ("serve", "token"):
        return http_cli.run(args)
    if args.command == "acp":
        return acp_cli.run(args)
    if args.command in watch_cli.COMMANDS:
        return watch_cli.run(args)
    return 2
