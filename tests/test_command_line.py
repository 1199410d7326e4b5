"""The command line as a newcomer meets it: help, version, errors in one line, exit 2.

Every test runs the real program in a subprocess (``python -m halo_actors`` or the
``halo-actors`` console script of this environment).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path

import trio

from halo_actors import __version__

BUDGET = 60.0
SCRIPT = Path(sys.executable).with_name("halo-actors")


async def run(
    *args: str, home: Path, program: list[str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    env = {**os.environ, "HALO_ACTORS_HOME": str(home)}
    with trio.fail_after(BUDGET):
        done = await trio.run_process(
            [*(program or [sys.executable, "-m", "halo_actors"]), *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
            cwd=cwd,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def error_lines(stderr: str) -> list[str]:
    """What ``serve`` printed on stderr, minus its no-tokens-yet warning."""
    return [line for line in stderr.splitlines() if not line.startswith("warning: no tokens")]


async def test_serve_with_a_port_in_use_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    """Rule: `serve` with a port in use prints one line (`port N is in use`) and exits 2."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = await run("serve", "--port", str(port), home=tmp_path)
    assert (code, out, error_lines(err)) == (2, "", [f"error: port {port} is in use"])


async def test_serve_with_a_port_out_of_range_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    code, out, err = await run("serve", "--port", "70000", home=tmp_path)
    assert (code, out, err) == (2, "", "error: port 70000 is out of range (0-65535)\n")


async def test_serve_refuses_a_store_that_is_not_postgresql_or_bad_node_options(
    tmp_path: Path,
) -> None:
    """Rule: a bad --store, schema, node id, lease ttl or --resident-idle is one line and
    exit 2 (nothing opened)."""
    cases = [
        (
            ["--store", "sqlite:///x.db"],
            "error: --store must be a postgresql:// URL, not 'sqlite:///x.db'",
        ),
        (["--node-id", "n1"], "error: --node-id needs --store (nodes share a PostgreSQL store)"),
        (
            ["--resident-idle", "-1"],
            "error: --resident-idle must be a count (0 or more) or 'off', not '-1'",
        ),
        (
            ["--store", "postgresql://u@127.0.0.1:1/x", "--node-id", "a b"],
            "error: node id 'a b' must be 1-64 of [A-Za-z0-9_.-]",
        ),
        (
            ["--store", "postgresql://u@127.0.0.1:1/x", "--lease-ttl", "0.1"],
            "error: lease ttl 0.1 must be 1 to 3600 seconds",
        ),
        (
            ["--store", "postgresql://u@127.0.0.1:1/x", "--store-schema", "Bad-Name"],
            "error: schema 'Bad-Name' must be 1-30 of [a-z0-9_], starting with a letter",
        ),
    ]
    for args, line in cases:
        code, out, err = await run("serve", "--port", "0", *args, home=tmp_path)
        assert (code, out, error_lines(err)) == (2, "", [line]), args


async def test_serve_refuses_a_missing_workspace_unless_asked_to_create_it(
    tmp_path: Path,
) -> None:
    """Rule: `serve --workspace` refuses a missing directory unless asked to create it."""
    code, out, err = await run("serve", "--workspace", "typo", home=tmp_path, cwd=tmp_path)
    missing = tmp_path / "typo"
    assert (code, out) == (2, "")
    assert err == f"error: workspace {missing} does not exist (pass --create to create it)\n"
    assert not missing.exists()
    with socket.socket() as taken:  # --create makes it, then the taken port ends the run
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        code, _, err = await run(
            "serve", "--workspace", "typo", "--create", "--port", port, home=tmp_path, cwd=tmp_path
        )
    assert code == 2 and f"created workspace {missing}" in err
    assert missing.is_dir()


async def test_token_create_prints_only_the_token_on_stdout(tmp_path: Path) -> None:
    """Rule: `token create` prints the token only on stdout (details on stderr), so
    `TOKEN=$(… token create …)` holds exactly the token."""
    code, out, err = await run(
        "token", "create", "--account", "alice", "--workspace", str(tmp_path), home=tmp_path
    )
    assert code == 0
    assert re.fullmatch(r"hat_[0-9a-f]{8}_[A-Za-z0-9_-]{32}\n", out)
    assert "account alice" in err and "shown only now" in err


async def test_the_help_texts_describe_the_program_and_its_options(tmp_path: Path) -> None:
    """Rule: `--help` has a real description; serve's options show their help and defaults."""
    code, top, _ = await run("--help", home=tmp_path)
    assert code == 0 and top.startswith("usage: python -m halo_actors ")
    assert "event-sourced actor runtime" in top and "Command line:" not in top
    _, serve, _ = await run("serve", "--help", home=tmp_path)
    assert "Serve the HTTP front" in serve
    assert "(default: 127.0.0.1)" in serve and "(default: 9527)" in serve and "--create" in serve
    _, create, _ = await run("token", "create", "--help", home=tmp_path)
    assert "(default: workspace)" in " ".join(create.split())


async def test_version_and_the_console_script_name_itself(tmp_path: Path) -> None:
    """Rule: there is a `--version`; the console script's usage says `halo-actors`."""
    assert await run("--version", home=tmp_path) == (
        0,
        f"python -m halo_actors {__version__}\n",
        "",
    )
    code, out, _ = await run("--help", home=tmp_path, program=[str(SCRIPT)])
    assert code == 0 and out.startswith("usage: halo-actors ")
    assert await run("--version", home=tmp_path, program=[str(SCRIPT)]) == (
        0,
        f"halo-actors {__version__}\n",
        "",
    )


EMBEDDED_SERVER = """
import trio
from halo_actors.fronts.http.app import FrontSettings
from halo_actors.fronts.http.server import open_server
from halo_actors.fronts.http.tokens import TokenStore

async def main() -> None:
    async with open_server(FrontSettings(tokens=TokenStore("state")), workspaces=("ws",)) as s:
        sup = await s.front.runtimes.get(s.front.runtimes.opened().popitem()[0])
        assert sup is not None
        root = await sup.create_session()
        await sup.send(root, "run echo hi")
        await sup.wait_idle(root)
        print("served", sup.output(root))

trio.run(main)
"""


async def test_an_embedded_runtime_is_quiet_by_default(tmp_path: Path) -> None:
    """Rule: an embedded runtime prints nothing of its own (no `runtime_opened`,
    `http_listening`) unless the program configures structlog."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "server.py").write_text(EMBEDDED_SERVER)
    code, out, err = await run(
        str(tmp_path / "server.py"), home=tmp_path, cwd=tmp_path, program=[sys.executable]
    )
    assert (code, err) == (0, "")
    assert out.startswith("served ")


async def test_the_cli_logs_info_lines_for_serve(tmp_path: Path) -> None:
    """Rule: verbose under the CLI: `serve` logs that it listens (the taken port ends it)."""
    (tmp_path / "ws").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        code, _, err = await run(
            "serve", "--workspace", "ws", "--port", port, home=tmp_path, cwd=tmp_path
        )
    assert code == 2 and "runtime_opened" in err
