"""``python -m halo_actors acp``: parsing and wiring only (the behaviour is in ``docs/acp.md``).

httpx (the ``acp`` extra) is imported by ``run`` alone, so ``--help`` works
without it. The token may come from ``$HALO_ACTORS_TOKEN`` instead of the
command line, where other users of the machine could read it in the process
list. Argument errors print one line on stderr and exit with status 2; stdout
stays reserved for protocol lines.
"""

from __future__ import annotations

import argparse
import os
import sys

TOKEN_ENV = "HALO_ACTORS_TOKEN"


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acp = commands.add_parser(
        "acp",
        help="speak ACP (Agent Client Protocol) on stdin/stdout, bridged to an HTTP front",
        description="An ACP agent for editors (Zed, JetBrains): JSON-RPC on stdio, "
        "the HTTP front's routes upstream. Logs go to stderr.",
    )
    acp.add_argument("--host", default="127.0.0.1", help="the HTTP front's host")
    acp.add_argument("--port", type=int, default=9527, help="the HTTP front's port")
    acp.add_argument("--scheme", choices=("http", "https"), default="http")
    acp.add_argument("--token", help=f"access token (default: ${TOKEN_ENV})")
    acp.add_argument(
        "--workspace",
        help="server-side workspace to address (needs a full token; default: the token's)",
    )
    acp.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="extra request header, e.g. for a gateway (repeatable; never x-token or content-type)",
    )
    acp.add_argument(
        "--reconnect-delay",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="first wait before re-attaching a dropped stream; doubles for each of 5 tries",
    )


def run(args: argparse.Namespace) -> int:
    from .client import parse_header

    token = args.token or os.environ.get(TOKEN_ENV, "")
    if not token:
        return _usage(f"a token is required: --token or ${TOKEN_ENV}")
    if not 0 < args.port < 65536:
        return _usage(f"--port must be 1..65535, got {args.port}")
    if not 0 <= args.reconnect_delay <= 60:
        return _usage("--reconnect-delay must be between 0 and 60 seconds")
    try:
        headers = [parse_header(spec) for spec in args.header]
    except ValueError as exc:
        return _usage(str(exc))
    return _serve(args, token, headers)


def _usage(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _serve(args: argparse.Namespace, token: str, headers: list[tuple[str, str]]) -> int:
    import trio

    from .client import HaloClient
    from .stdio import serve_stdio
    from .turn import backoff_from

    host = f"[{args.host}]" if ":" in args.host else args.host
    client = HaloClient(
        f"{args.scheme}://{host}:{args.port}",
        token,
        workspace=args.workspace,
        extra_headers=headers,
    )
    try:
        trio.run(serve_stdio, client, backoff_from(args.reconnect_delay))
    except KeyboardInterrupt:
        return 130
    return 0
