"""Shared by the HTTP chaos suites (kill -9, hostile input, load): streams, the log, servers.

- :class:`Chain`: what one client received over one logical stream, across every
  connection it took (a chat, then ``/subscribe`` resumes with ``Last-Event-ID``);
- :class:`LogIndex` and :func:`check_chain`: the invariants a chain must satisfy
  against the event log read after the fact (every frame is in the log with the
  same content; no gap, no duplicate over the range the chain covered);
- :func:`read_log`: the whole log of a workspace, opened read-only;
- :class:`ServerProcess`: ``python -m halo_actors serve`` (or another server
  script) as a child process in its own process group, with SIGKILL that also
  takes the commands it spawned, and RSS sampling.

Frames: a frame whose type is a stored client kind carries the seq of its record
as its id. ``session`` frames carry the stream's cursor; a ``complete`` with the id
of the connection's own cursor is the one an idle session answers with (it covers
nothing new); ``queued`` frames cover nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import trio

from halo_actors.core.events import (
    ErrorRaised,
    Record,
    RoundStarted,
    TextStreamed,
    ThinkingStreamed,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
)
from halo_actors.core.log import SqliteEventLog

Payload = dict[str, object]
RECORD_FRAMES = frozenset({"user", "thinking", "stream", "tool_call", "tool_result", "error"})
"""Frame types that show exactly one stored record (the demo agent never writes MEDIA lines)."""
RESULT_CAP = 500


# --- what a client received --------------------------------------------------------


@dataclass
class Connection:
    """One HTTP response of a chain."""

    sent_after: int | None
    """The ``Last-Event-ID`` this connection asked to resume after (None: a fresh stream)."""
    cursor: int | None = None
    """The id of its ``session`` frame (None: the stream never opened)."""
    frames: list[tuple[int, Payload]] = field(default_factory=list)
    """Every frame after the ``session`` frame, in arrival order."""
    end: str = "open"
    """``complete`` (terminal), ``queued``, ``eof`` (closed without a complete), ``cut``
    (transport error), or ``status <n>``."""


@dataclass
class Chain:
    """Everything one client received about one session over one logical stream."""

    session_id: str
    kind: str
    message: str | None = None
    connections: list[Connection] = field(default_factory=list)

    @property
    def acknowledged(self) -> bool:
        """The message is durable: the chat answered with its ``session`` frame."""
        return bool(self.connections) and self.connections[0].cursor is not None

    @property
    def last_id(self) -> int | None:
        """The id to resume after: the last frame's (or cursor's) id of any connection."""
        for conn in reversed(self.connections):
            if conn.frames:
                return conn.frames[-1][0]
            if conn.cursor is not None:
                return conn.cursor
        return None

    def frame_count(self) -> int:
        return sum(len(c.frames) for c in self.connections)


def parse_sse_lines(lines: list[str]) -> tuple[int, Payload] | None:
    """One SSE event block (its lines) → ``(id, payload)``; None for a comment block."""
    event_id: int | None = None
    data: list[str] = []
    for line in lines:
        if line.startswith("id: "):
            event_id = int(line[4:])
        elif line.startswith("data: "):
            data.append(line[6:])
    if not data:
        return None
    assert event_id is not None, f"a frame without an id: {lines!r}"
    payload = json.loads("\n".join(data))
    assert isinstance(payload, dict)
    return event_id, payload


async def read_stream(response: httpx.Response, conn: Connection) -> None:
    """Read an SSE response into ``conn`` until it ends; transport errors propagate."""
    block: list[str] = []
    async for line in response.aiter_lines():
        if line:
            block.append(line)
            continue
        parsed = parse_sse_lines(block)
        block = []
        if parsed is None:
            continue
        if conn.cursor is None:
            assert parsed[1]["type"] == "session", parsed
            conn.cursor = parsed[0]
            continue
        conn.frames.append(parsed)
        kind = parsed[1]["type"]
        if kind == "queued":
            conn.end = "queued"
        elif kind == "complete":
            conn.end = "complete"
    if conn.end == "open":
        conn.end = "eof"


# --- the log, after the fact -------------------------------------------------------


async def read_log(workspace: Path) -> list[Record]:
    """Every record of the workspace's log, through a read-only open (safe beside a server)."""
    log = await SqliteEventLog.open(workspace / ".halo" / "events.db", read_only=True)
    try:
        return await log.read()
    finally:
        await log.aclose()


def _client_kind(record: Record) -> str | None:
    """The frame type a stored record shows as, or None (terminal completes only)."""
    match record.event:
        case RoundStarted():
            return "user"
        case ThinkingStreamed():
            return "thinking"
        case TextStreamed():
            return "stream"
        case ToolCalled():
            return "tool_call"
        case ToolReturned():
            return "tool_result"
        case ErrorRaised():
            return "error"
        case TurnCompleted(batch_boundary=False):
            return "complete"
        case _:
            return None


class LogIndex:
    """The log by seq and, per session, the seqs a stream of that session must show."""

    def __init__(self, records: list[Record]) -> None:
        self.by_seq = {r.seq: r for r in records}
        self.shown: dict[str, list[int]] = {}
        for record in records:
            if _client_kind(record) is not None:
                self.shown.setdefault(record.session_id, []).append(record.seq)
        self.max_seq = records[-1].seq if records else 0

    def shown_between(self, session_id: str, after: int, until: int) -> list[int]:
        return [s for s in self.shown.get(session_id, []) if after < s <= until]


def frame_matches(record: Record, session_id: str, payload: Payload) -> bool:
    """The frame shows this record: same session, same kind, same content."""
    if record.session_id != session_id or _client_kind(record) != payload["type"]:
        return False
    match record.event:
        case RoundStarted(text=text) | TextStreamed(text=text) | ThinkingStreamed(text=text):
            return payload.get("text") == text
        case ErrorRaised(error=error):
            return payload.get("error") == error
        case ToolCalled() as e:
            return (payload.get("toolName"), payload.get("toolUseId")) == (
                e.tool_name,
                e.tool_use_id,
            )
        case ToolReturned() as e:
            shown = e.ui_result if e.ui_result is not None else e.result
            return payload.get("result") == shown[:RESULT_CAP]
        case _:
            return True


@dataclass
class ChainReport:
    checks: int = 0
    problems: list[str] = field(default_factory=list)
    covered: int = 0
    """The last log position the chain covered (0: it never opened)."""


def check_chain(chain: Chain, index: LogIndex) -> ChainReport:
    """Every shown frame is its record; over the covered range, no gap and no duplicate."""
    report = ChainReport()
    opened = [c for c in chain.connections if c.cursor is not None]
    if not opened:
        return report
    sid = chain.session_id
    start = opened[0].cursor
    assert start is not None
    covered = start
    shown: list[int] = []
    for conn in opened:
        assert conn.cursor is not None
        if conn.sent_after is not None and conn.cursor != conn.sent_after:
            report.problems.append(
                f"{sid}: resumed after {conn.sent_after} but the stream opened at {conn.cursor}"
            )
        previous = conn.cursor
        for seq, payload in conn.frames:
            kind = payload["type"]
            report.checks += 1
            if seq < previous:
                report.problems.append(f"{sid}: frame id {seq} after {previous} in one stream")
            previous = max(previous, seq)
            if kind == "queued":
                continue
            covered = max(covered, seq)
            record = index.by_seq.get(seq)
            if kind == "complete":
                # Only a terminal complete of this session is a record; an idle session's
                # answer (or a run's agent_done standing in for one) is a log position.
                terminal = (
                    record is not None
                    and record.session_id == sid
                    and _client_kind(record) == "complete"
                )
                if seq != conn.cursor and terminal:
                    shown.append(seq)
                continue
            if kind not in RECORD_FRAMES:
                continue
            if record is None or not frame_matches(record, sid, payload):
                report.problems.append(f"{sid}: frame {seq} {payload!r} is not in the log as shown")
                continue
            shown.append(seq)
    report.covered = covered
    duplicates = sorted({s for s in shown if shown.count(s) > 1})
    if duplicates:
        report.problems.append(f"{sid}: duplicate frames {duplicates[:10]}")
    expected = index.shown_between(sid, start, covered)
    missing = sorted(set(expected) - set(shown))
    report.checks += len(expected)
    if missing:
        report.problems.append(
            f"{sid}: gap: {len(missing)} of {len(expected)} records in ({start}, {covered}] "
            f"never shown, first {missing[:10]}"
        )
    return report


# --- a server in a child process ---------------------------------------------------


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (read from ``/proc``)."""
    children = _children_map()
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise LookupError(f"no VmRSS for {pid}")


class ServerProcess:
    """One server child process: started, its URL read from stdout, killed or stopped.

    It leads its own process group. :meth:`kill` freezes the group (SIGSTOP) so it
    cannot spawn anything more, collects every descendant (the shell commands it ran
    lead groups of their own), then SIGKILLs all of them, by pid and group.
    """

    def __init__(self, argv: list[str], env: dict[str, str], stderr: Path) -> None:
        self.argv = argv
        self.env = env
        self.stderr_path = stderr
        self.process: trio.Process | None = None
        self.url = ""
        self._lines: AsyncIterator[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def spawn(self) -> None:
        """Start the process without waiting for it to be ready."""
        with self.stderr_path.open("ab") as stderr:
            self.process = await trio.lowlevel.open_process(
                self.argv,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
            )

    async def start(self, ready_prefix: bytes = b"halo_actors http front listening on ") -> str:
        """Start the process and wait for the line that says where it listens."""
        await self.spawn()
        line = await self.readline()
        if not line.startswith(ready_prefix):
            await self.kill()
            raise RuntimeError(f"server did not start: {line!r}; see {self.stderr_path}")
        self.url = line[len(ready_prefix) :].decode().strip()
        return self.url

    async def readline(self) -> bytes:
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        line = bytearray()
        while not line.endswith(b"\n"):
            chunk = await stdout.receive_some(1)
            if not chunk:
                break
            line += chunk
        return bytes(line)

    async def ask(self, command: str) -> dict[str, object]:
        """Send one line on stdin, read one JSON line back (servers that speak it)."""
        assert self.process is not None and self.process.stdin is not None
        await self.process.stdin.send_all(command.encode() + b"\n")
        answer = json.loads(await self.readline())
        assert isinstance(answer, dict)
        return answer

    async def kill(self) -> None:
        """SIGKILL the server and everything it spawned; reap the server."""
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGSTOP)
            stragglers = descendants(process.pid)
            for pid in [process.pid, *stragglers]:
                for send in (os.killpg, os.kill):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        send(pid, signal.SIGKILL)
        with trio.CancelScope(shield=True):
            await process.wait()
        await self._close_pipes()

    async def terminate(self, grace: float = 10.0) -> int:
        """SIGTERM and wait up to ``grace`` seconds (then SIGKILL); the exit status."""
        process = self.process
        assert process is not None
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(grace):
                await process.wait()
        if process.returncode is None:
            await self.kill()
        await self._close_pipes()
        assert process.returncode is not None
        return process.returncode

    async def _close_pipes(self) -> None:
        assert self.process is not None
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                await pipe.aclose()


def serve_argv(workspace: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "halo_actors",
        "serve",
        "--port",
        "0",
        "--workspace",
        str(workspace),
        *extra,
    ]


async def create_token(
    state: Path, workspace: Path, account: str = "chaos", access: str = "workspace"
) -> str:
    env = {**os.environ, "HALO_ACTORS_HOME": str(state)}
    argv = [sys.executable, "-m", "halo_actors", "token", "create", "--account", account]
    argv += ["--access", access, "--workspace", str(workspace), "--json"]
    done = await trio.run_process(argv, env=env, capture_stdout=True)
    token = json.loads(done.stdout)["token"]
    assert isinstance(token, str)
    return token
