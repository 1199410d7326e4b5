"""Command line: ``python -m halo_actors <command>``; parsing and wiring only."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .fronts.http import cli as http_cli
from .logging import configure_logging


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m halo_actors", description=__doc__)
    parser.add_argument(
        "--log-format",
        choices=("console", "json"),
        default="console",
        help="how runtime logs (stderr) are written",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the demo tour")
    demo.add_argument("--workspace", help="workspace directory (default: a temporary one)")
    demo.add_argument("--json", action="store_true", help="print events as JSON lines")
    demo.add_argument("--plain", action="store_true", help="print plain lines (default)")
    http_cli.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_format)
    if args.command == "demo":
        from .demo.tour import run_demo

        return run_demo(args.workspace, as_json=args.json)
    if args.command in ("serve", "token"):
        return http_cli.run(args)
    return 2
