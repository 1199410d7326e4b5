"""One token interface, two backends: the state directory's file and the deployment's
PostgreSQL table (``serve --store``). Every test here runs on both; the file store's
own details (its mode, a damaged file) are in ``test_access.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pg_support
import psycopg
import pytest
import trio
from psycopg import sql

from halo_actors import cli
from halo_actors.core.errors import InvalidInput
from halo_actors.fronts.http import cli as http_cli
from halo_actors.fronts.http.pgtokens import PgTokenStore, TokenStoreUnavailable
from halo_actors.fronts.http.tokens import TokenBackend, TokenCache, TokenStore, hash_token

BUDGET = 20.0


@pytest.fixture(params=["file", pytest.param("postgres", marks=pytest.mark.pg)])
def backend(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def store_args(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    """The CLI options that name this backend's store."""
    state = ["--state", str(tmp_path / "state")]
    if backend == "file":
        return state
    schema = request.getfixturevalue("pg_schemas").new()
    return [*state, "--store", pg_support.dsn(), "--store-schema", schema]


@pytest.fixture
def store(store_args: list[str]) -> Iterator[TokenBackend]:
    opts = dict(zip(store_args[::2], store_args[1::2], strict=True))
    if "--store" not in opts:
        yield TokenStore(opts["--state"])
        return
    pg = PgTokenStore(opts["--store"], opts["--store-schema"], state_dir=opts["--state"])
    try:
        yield pg
    finally:
        pg.close()


def stored_text(store: TokenBackend) -> str:
    """Everything the backend keeps, as text (the file, or every row of the table)."""
    if isinstance(store, TokenStore):
        return store.path.read_text()
    assert isinstance(store, PgTokenStore)
    with psycopg.connect(store.dsn) as conn:
        table = sql.Identifier(store.schema, "tokens")
        rows = conn.execute(sql.SQL("SELECT * FROM {}").format(table)).fetchall()
    return repr(rows)


def test_a_token_is_stored_hashed_and_found_by_its_secret(
    store: TokenBackend, tmp_path: Path
) -> None:
    token = store.create("alice", "readonly", tmp_path)
    assert token not in stored_text(store) and hash_token(token) in stored_text(store)
    info = store.find(token)
    assert info is not None and (info.account_id, info.access) == ("alice", "readonly")
    assert info.workspace == str(tmp_path.resolve())
    assert store.find(token + "x") is None
    assert [t.id for t in store.load()] == [info.id]


def test_a_token_is_revoked_by_its_id_or_its_full_string(
    store: TokenBackend, tmp_path: Path
) -> None:
    first = store.create("alice", "full", tmp_path)
    second = store.create("bob", "workspace", tmp_path)
    one, two = store.find(first), store.find(second)
    assert one is not None and two is not None
    assert store.revoke(one.id) == one
    assert store.revoke(second) == two
    assert store.revoke(one.id) is None and store.revoke(second) is None
    assert store.load() == []


@pytest.mark.parametrize(
    ("account", "access", "workspace", "error"),
    [
        ("bad_name", "full", None, "account id"),
        ("alice", "root", None, "access must be one of"),
        ("alice", "full", "missing", "is not a directory"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_stored(
    store: TokenBackend,
    tmp_path: Path,
    account: str,
    access: str,
    workspace: str | None,
    error: str,
) -> None:
    kept = store.create("alice", "full", tmp_path)
    version = store.version()
    with pytest.raises(InvalidInput, match=error):
        store.create(account, access, tmp_path / workspace if workspace else tmp_path)
    assert [t.sha256 for t in store.load()] == [hash_token(kept)]
    assert store.version() == version


def test_every_change_moves_the_version(store: TokenBackend, tmp_path: Path) -> None:
    seen = {store.version()}
    token = store.create("alice", "full", tmp_path)
    seen.add(store.version())
    store.revoke(token)
    seen.add(store.version())
    assert len(seen) == 3


async def test_the_server_cache_sees_a_revocation_and_reports_it(
    store: TokenBackend, tmp_path: Path
) -> None:
    token = store.create("alice", "full", tmp_path)
    revoked: list[list[str]] = []
    cache = TokenCache(store, reload_every=0.05, on_revoked=revoked.append)
    with trio.fail_after(BUDGET):
        assert await cache.lookup(token) is not None
        await trio.to_thread.run_sync(store.revoke, token)
        while await cache.lookup(token) is not None:  # noqa: ASYNC110 - polls the store
            await trio.sleep(0.05)
    assert revoked == [[hash_token(token)]]


def test_the_token_commands_work_on_either_store(
    store_args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(*argv: str) -> int:
        return http_cli.run(cli.build_parser().parse_args(["token", *argv, *store_args]))

    assert run("create", "--account", "bob", "--workspace", str(tmp_path), "--json") == 0
    created = json.loads(capsys.readouterr().out)
    assert run("list", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [t["accountId"] for t in listed] == ["bob"] and "sha256" not in listed[0]
    assert run("revoke", created["token"]) == 0
    assert run("revoke", created["token"]) == 2
    assert "no such token" in capsys.readouterr().err


@pytest.mark.pg
def test_an_unreachable_token_database_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = PgTokenStore("postgresql://nobody@127.0.0.1:1/none", "halo")
    with pytest.raises(TokenStoreUnavailable, match=r"halo\.tokens"):
        store.load()
    argv = ["token", "list", "--store", "postgresql://nobody@127.0.0.1:1/none"]
    assert http_cli.run(cli.build_parser().parse_args(argv)) == 2
    assert "error: PostgreSQL table halo.tokens" in capsys.readouterr().err
    bad = ["token", "list", "--store", "mysql://x"]
    assert http_cli.run(cli.build_parser().parse_args(bad)) == 2
