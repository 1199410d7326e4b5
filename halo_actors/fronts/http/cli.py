"""``python -m halo_actors serve`` and ``python -m halo_actors token create|list|revoke``.

Parsing and wiring only. Starlette and Hypercorn are imported by ``serve`` alone,
so the token commands work without the ``http`` extra. Token commands print
human-readable lines, or one JSON document with ``--json``; errors go to stderr
with exit status 2.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import sys

from ...core.errors import InvalidInput
from ...runtime.ownership import ClusterStore, default_node_id
from ...runtime.passivation import DEFAULT_RESIDENT_IDLE
from .tokens import ACCESS_LEVELS, HOME_ENV, TokenBackend, TokenStore

STATE_HELP = f"directory of the token file (default: ${HOME_ENV}, else ~/.halo_actors)"
MODEL_ENV = "HALO_MODEL"
MODEL_HELP = (
    "the agents' model: anthropic:<model> or openai:<model> (endpoint and key from "
    "ANTHROPIC_BASE_URL/ANTHROPIC_API_KEY or OPENAI_BASE_URL/OPENAI_API_KEY); "
    f"default: ${MODEL_ENV}, else the scripted demo agent"
)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the HTTP front (web channel, SSE, WebSocket)",
        description="Serve the HTTP front (docs/http.md) until SIGINT or SIGTERM. Each "
        "workspace's runtime opens on first use; clients authenticate with tokens from "
        "`token create`.",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    serve.add_argument(
        "--port", type=int, default=9527, help="TCP port, 0 for any free one (default: %(default)s)"
    )
    serve.add_argument(
        "--workspace",
        action="append",
        default=[],
        help="an existing directory whose runtime opens at start (repeatable)",
    )
    serve.add_argument(
        "--create", action="store_true", help="create a --workspace directory that does not exist"
    )
    serve.add_argument("--state", help=STATE_HELP)
    serve.add_argument(
        "--keepalive", type=float, default=15.0, help="SSE keepalive seconds (default: %(default)s)"
    )
    serve.add_argument("--model", metavar="SPEC", help=MODEL_HELP)
    serve.add_argument(
        "--store",
        metavar="DSN",
        help="keep the event logs in this PostgreSQL database (postgresql://...), shared by "
        "every node serving it (docs/deploy.md); default: each workspace's SQLite file",
    )
    serve.add_argument(
        "--store-schema",
        default="halo",
        help="the deployment's schema prefix in --store (default: %(default)s)",
    )
    serve.add_argument(
        "--node-id",
        help="this node's name, unique per process and stable across its restarts "
        "(default: <host>-<port>)",
    )
    serve.add_argument(
        "--lease-ttl",
        type=float,
        default=10.0,
        help="seconds a node owns a tree without renewing; another node takes the trees "
        "of a dead node after this (default: %(default)s)",
    )
    serve.add_argument(
        "--resident-idle",
        default=str(DEFAULT_RESIDENT_IDLE),
        metavar="N|off",
        help="sessions at rest kept in memory per workspace; the others are passivated "
        "and rebuilt from the log when addressed (default: %(default)s)",
    )

    token = commands.add_parser("token", help="create, list or revoke access tokens")
    actions = token.add_subparsers(dest="token_command", required=True)
    create = actions.add_parser(
        "create",
        help="create a token (its secret is shown once)",
        description="Create a token and print it alone on stdout (details on stderr), so "
        "`TOKEN=$(... token create ...)` holds exactly the token.",
    )
    create.add_argument("--account", required=True, help="account id: [A-Za-z0-9-]{1,64}")
    create.add_argument(
        "--access",
        choices=ACCESS_LEVELS,
        default="workspace",
        help="full: everything; workspace: its own sessions and workspace; readonly: read "
        "routes only (default: %(default)s)",
    )
    create.add_argument("--workspace", required=True, help="the directory the token is bound to")
    create.add_argument("--json", action="store_true", help="print one JSON document instead")
    create.add_argument("--state", help=STATE_HELP)
    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--state", help=STATE_HELP)
    revoke = actions.add_parser("revoke", help="revoke a token by its id or its full string")
    revoke.add_argument("token_or_id")
    revoke.add_argument("--state", help=STATE_HELP)
    for action in (create, listing, revoke):
        action.add_argument(
            "--store",
            metavar="DSN",
            help="the tokens of the nodes serving with this --store (postgresql://...), "
            "kept in that database instead of the state directory's file",
        )
        action.add_argument(
            "--store-schema", default="halo", help="the deployment's --store-schema (default: halo)"
        )


def run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        return _serve(args)
    try:
        store = token_backend(args.state, args.store, args.store_schema)
        if args.token_command == "create":
            return _create(store, args)
        if args.token_command == "list":
            return _list(store, as_json=args.json)
        return _revoke(store, args.token_or_id)
    except (InvalidInput, OSError) as exc:  # OSError: the token file or database
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _create(store: TokenBackend, args: argparse.Namespace) -> int:
    token = store.create(args.account, args.access, args.workspace)
    info = store.find(token)
    assert info is not None
    if args.json:
        out = {
            "token": token,
            "accountId": info.account_id,
            "access": info.access,
            "workspace": info.workspace,
        }
        print(json.dumps(out))
    else:
        print(token)
        details = f"id {info.id} · account {info.account_id} · {info.access} · {info.workspace}"
        print(details, file=sys.stderr)
        print(f"stored hashed in {store.path}; the token is shown only now", file=sys.stderr)
    return 0


def _list(store: TokenBackend, *, as_json: bool) -> int:
    tokens = store.load()
    if as_json:
        print(json.dumps([t.public() for t in tokens]))
        return 0
    for t in tokens:
        print(f"{t.id}  {t.account_id:<20} {t.access:<9} {t.workspace}")
    return 0


def _revoke(store: TokenBackend, token_or_id: str) -> int:
    gone = store.revoke(token_or_id)
    if gone is None:
        print("error: no such token", file=sys.stderr)
        return 2
    print(f"revoked {gone.id} ({gone.account_id})")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import os

    import trio

    from ...runtime.models import resolve_model
    from .app import FrontSettings
    from .server import serve_until_signalled

    if not 0 <= args.port <= 65535:
        return _fail(f"port {args.port} is out of range (0-65535)")
    if args.resident_idle != "off" and not args.resident_idle.isdigit():
        return _fail(
            f"--resident-idle must be a count (0 or more) or 'off', not {args.resident_idle[:40]!r}"
        )
    try:
        workspaces = tuple(_workspace(raw, create=args.create) for raw in args.workspace)
    except InvalidInput as exc:
        return _fail(str(exc))
    spec = args.model or os.environ.get(MODEL_ENV) or None
    try:
        model = resolve_model(spec) if spec else None
    except InvalidInput as exc:
        return _fail(str(exc))
    try:
        cluster = _cluster(args)
    except InvalidInput as exc:
        return _fail(str(exc))
    settings = FrontSettings(
        tokens=token_backend(args.state, cluster.dsn, cluster.schema)
        if cluster is not None
        else TokenStore(args.state),
        keepalive=args.keepalive,
        model=model,
        cluster=cluster,
        resident_idle=None if args.resident_idle == "off" else int(args.resident_idle),
    )
    try:
        no_tokens = not settings.tokens.load()
    except OSError as exc:  # the token file or database
        return _fail(str(exc))
    if no_tokens:
        where = f" --store {cluster.dsn} --store-schema {cluster.schema}" if cluster else ""
        print(
            "warning: no tokens yet; create one with "
            f"`python -m halo_actors token create --account NAME --workspace DIR{where}`",
            file=sys.stderr,
        )

    async def main() -> None:
        try:
            await serve_until_signalled(
                settings, host=args.host, port=args.port, workspaces=workspaces
            )
        finally:
            aclose = getattr(model, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True):
                    await aclose()

    if spec:
        print(f"model: {spec}", file=sys.stderr)
    if cluster is not None:
        print(
            f"store: PostgreSQL, schema {cluster.schema}, node {cluster.node_id}", file=sys.stderr
        )
    try:
        trio.run(main)
    except (OSError, BaseExceptionGroup) as exc:
        problem = listen_problem(exc, args.host, args.port)
        if problem is None:
            raise
        return _fail(problem)
    return 0


def _cluster(args: argparse.Namespace) -> ClusterStore | None:
    """The shared store of ``--store``, or None (SQLite); a bad option is ``InvalidInput``."""
    if args.store is None:
        if args.node_id is not None:
            raise InvalidInput("--node-id needs --store (nodes share a PostgreSQL store)")
        return None
    if not args.store.startswith(("postgresql://", "postgres://")):
        raise InvalidInput(f"--store must be a postgresql:// URL, not {args.store[:40]!r}")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise InvalidInput("--store needs psycopg: pip install 'halo_actors[pg]'") from None
    node = args.node_id or default_node_id(args.port)
    return ClusterStore(args.store, args.store_schema, node, args.lease_ttl)


def token_backend(state: str | None, store: str | None, schema: str = "halo") -> TokenBackend:
    """The file store of ``state``, or with ``store`` (a ``postgresql://`` URL) the
    deployment's token table there; a bad option is ``InvalidInput``."""
    if store is None:
        return TokenStore(state)
    if not store.startswith(("postgresql://", "postgres://")):
        raise InvalidInput(f"--store must be a postgresql:// URL, not {store[:40]!r}")
    ClusterStore(store, schema)  # the same checks as serve's
    try:
        from .pgtokens import PgTokenStore
    except ImportError:
        raise InvalidInput("--store needs psycopg: pip install 'halo_actors[pg]'") from None
    return PgTokenStore(store, schema, state_dir=state)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _workspace(raw: str, *, create: bool) -> str:
    """The absolute path of a ``--workspace``; a missing one is refused unless ``create``."""
    path = os.path.abspath(raw)
    if os.path.isdir(path):
        return path
    if os.path.lexists(path):
        raise InvalidInput(f"workspace {path} is not a directory")
    if not create:
        raise InvalidInput(f"workspace {path} does not exist (pass --create to create it)")
    os.makedirs(path)
    print(f"created workspace {path}", file=sys.stderr)
    return path


def listen_problem(exc: BaseException, host: str, port: int) -> str | None:
    """One line for a failure to listen (port in use, no permission, unknown host), or
    None when ``exc`` is something else. Hypercorn's error arrives inside trio's groups."""
    if isinstance(exc, BaseExceptionGroup):
        found = [listen_problem(e, host, port) for e in exc.exceptions]
        return next((p for p in found if p is not None), None)
    if isinstance(exc, socket.gaierror):
        return f"cannot listen on {host}: {exc.strerror}"
    if not isinstance(exc, OSError):
        return None
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} is in use"
    if exc.errno == errno.EACCES:
        return f"no permission to listen on port {port}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host}: the address is not on this machine"
    return None
