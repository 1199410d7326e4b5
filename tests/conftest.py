"""Shared pytest fixtures. Each block is owned by the area named in its header."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pg_support
import pytest
from pg_nodes import Cluster
from served import WebServer
from web_client import Harness, serve_harness

from halo_actors.core.log import DEFAULT_MAX_EVENT_BYTES, MemoryEventLog, SqliteEventLog
from halo_actors.core.log.postgres import PostgresEventLog

# --- PostgreSQL (core/log/postgres.py, multi-node): a server, and schemas per run ----


@pytest.fixture(scope="session")
def pg_schemas() -> Iterator[pg_support.SchemaFactory]:
    """Fresh schema names for this run (``.new()``); every one is dropped at the end.
    Skips the test (fails it in CI / make test-pg) when no server is reachable."""
    pg_support.require_server()
    factory = pg_support.SchemaFactory()
    try:
        yield factory
    finally:
        factory.drop_all()


@pytest.fixture
def cluster(tmp_path: Path, pg_schemas: pg_support.SchemaFactory) -> Iterator[Cluster]:
    """Real ``serve --store`` nodes on loopback sharing one fresh schema (2 s leases);
    every node is ended after the test."""
    nodes = Cluster(tmp_path, pg_support.dsn(), pg_schemas.new(), ttl=2.0)
    try:
        yield nodes
    finally:
        nodes.close()


# --- event log (core/log): every fixture here runs once per backend -------------

AnyEventLog = MemoryEventLog | SqliteEventLog | PostgresEventLog
OpenEventLog = Callable[..., Awaitable[AnyEventLog]]
"""``await open_event_log(max_event_bytes=…)``: a fresh, empty log of the backend under test."""


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.pg),
        pytest.param("postgres-shared", marks=pytest.mark.pg),
    ]
)
def log_backend(request: pytest.FixtureRequest) -> str:
    """The backend under test; a test that uses a log fixture runs once per backend.
    ``postgres`` is a single-writer (pipelined) log, ``postgres-shared`` one that several
    nodes may write (seqs from the commit, not pipelined)."""
    backend: str = request.param
    return backend


@pytest.fixture
async def open_event_log(
    log_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[OpenEventLog]:
    """A factory of fresh logs (each SQLite one in its own file, each PostgreSQL one in
    its own schema); all closed after the test."""
    pg = log_backend.startswith("postgres")
    schemas = request.getfixturevalue("pg_schemas") if pg else None
    opened: list[AnyEventLog] = []

    async def open_(*, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> AnyEventLog:
        log: AnyEventLog
        if log_backend == "memory":
            log = MemoryEventLog(max_event_bytes=max_event_bytes)
        elif schemas is not None:
            log = await PostgresEventLog.open(
                pg_support.dsn(),
                schema=schemas.new(),
                max_event_bytes=max_event_bytes,
                single_writer=log_backend == "postgres",
            )
        else:
            path = tmp_path / f"log{len(opened)}" / ".halo" / "events.db"
            log = await SqliteEventLog.open(path, max_event_bytes=max_event_bytes)
        opened.append(log)
        return log

    try:
        yield open_
    finally:
        for log in opened:
            await log.aclose()


@pytest.fixture
async def event_log(open_event_log: OpenEventLog) -> AnyEventLog:
    """An empty log of each backend with default options, closed after the test."""
    return await open_event_log()


# --- HTTP front (tests/http, tests/acp): a real hypercorn on 127.0.0.1 port 0 per test ---


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    """The server with the test script (``web_client.TEST_SCRIPT``), shut down after the test."""
    async with serve_harness(tmp_path) as harness:
        yield harness


# --- sandbox (tools/sandbox.py, tests/security): one line saying whether it runs here ---


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from sandbox_check import sandbox_problem

    problem = sandbox_problem()
    if problem is not None:
        terminalreporter.write_line(f"sandbox tests skipped: {problem}", yellow=True)
    line = pg_support.skip_line()  # PostgreSQL: one line when its tests skipped
    if line:
        terminalreporter.write_line(line, yellow=True)


# --- a server subprocess (tests/web, tests/watch): restartable on its port --------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[WebServer]:
    """``python -m halo_actors serve`` on a free port; stopped (and waited for) after the test."""
    served = WebServer(tmp_path)
    served.start()
    try:
        yield served
    finally:
        served.stop()
