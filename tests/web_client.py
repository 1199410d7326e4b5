"""A real HTTP front for tests (the ``harness`` fixture), its test script, an SSE reader.

Shared by ``tests/http`` and ``tests/acp`` (this directory is on ``sys.path``
through ``tests/conftest.py``).

The server runs a ScriptedModel whose rules make turns slow or shaped on purpose
(``slow N``, ``media``, ``bigtool``, ``think``), falling back to the built-in demo
agent. Tokens live in the test's own state directory.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

from halo_actors.agent.demo_agent import DEMO_SCRIPT
from halo_actors.agent.scripted import Rule, Script, ScriptedCall, ScriptedModel, Step
from halo_actors.core.log import LogBase
from halo_actors.fronts.http.app import FrontSettings
from halo_actors.fronts.http.limits import load_test_limits
from halo_actors.fronts.http.server import RunningServer, open_server
from halo_actors.fronts.http.tokens import TokenStore
from halo_actors.runtime.supervisor import Supervisor

PACE = 0.05
"""Seconds between the chunks of a ``slow N`` turn."""


def _slow(n: int) -> tuple[Step, ...]:
    return (Step(text="".join(f"{i}\n" for i in range(1, n + 1)), chunk=2, delay=PACE),)


TEST_SCRIPT = Script(
    rules=(
        Rule(match=r"^slow (\d+)$", build=lambda m: _slow(int(m.group(1)))),
        Rule(
            match=r"^media$",
            steps=(Step(text="Here it is:\nMEDIA: out/report.txt\nDone.\n", chunk=4),),
        ),
        Rule(
            match=r"^bigtool$",
            steps=(
                Step(calls=(ScriptedCall(name="shell_exec", input={"command": "seq 1 400"}),)),
                Step(text="ok"),
            ),
        ),
        Rule(match=r"^think$", steps=(Step(thinking="hmm", text="thought"),)),
        *DEMO_SCRIPT.rules,
    )
)


@dataclass(frozen=True)
class EventId:
    """An SSE frame id, ordered as the stream sends them: ``N.1 < N.2 < N < N+1``."""

    seq: int
    part: int = 0

    @classmethod
    def parse(cls, text: str) -> EventId:
        seq, _, part = text.partition(".")
        return cls(int(seq), int(part) if part else 0)

    def _key(self) -> tuple[int, float]:
        return self.seq, self.part or float("inf")

    @staticmethod
    def _key_of(other: object) -> tuple[int, float] | None:
        if isinstance(other, int):
            return other, float("inf")
        return other._key() if isinstance(other, EventId) else None

    def __lt__(self, other: object) -> bool:
        key = self._key_of(other)
        return NotImplemented if key is None else self._key() < key

    def __gt__(self, other: object) -> bool:
        key = self._key_of(other)
        return NotImplemented if key is None else self._key() > key

    def __str__(self) -> str:
        return f"{self.seq}.{self.part}" if self.part else str(self.seq)


@dataclass
class Frame:
    id: EventId
    data: dict[str, object]

    @property
    def type(self) -> object:
        return self.data["type"]


@dataclass
class SseRead:
    frames: list[Frame] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)

    def types(self) -> list[object]:
        return [f.type for f in self.frames]

    def text(self) -> str:
        return "".join(str(f.data["text"]) for f in self.frames if f.type == "stream")


class SseStream:
    """Reads frames from one streaming response, a few at a time."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()
        self.read = SseRead()

    async def take(self, count: int | None = None) -> list[Frame]:
        """The next ``count`` frames (all the rest when None); fewer if the body ends."""
        got: list[Frame] = []
        event_id: EventId | None = None
        data: list[str] = []
        async for line in self._lines:
            if line.startswith(":"):
                self.read.comments.append(line)
            elif line.startswith("id: "):
                event_id = EventId.parse(line[4:])
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and data:
                assert event_id is not None, "every frame carries an id"
                got.append(Frame(event_id, json.loads("\n".join(data))))
                event_id, data = None, []
                if count is not None and len(got) >= count:
                    break
        self.read.frames.extend(got)
        return got


async def read_sse(response: httpx.Response, *, stop_after: int | None = None) -> SseRead:
    """Parse an SSE body until it ends (or after ``stop_after`` frames)."""
    stream = SseStream(response)
    await stream.take(stop_after)
    return stream.read


async def sse(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    stop_after: int | None = None,
    status: int = 200,
    **kwargs: Any,
) -> SseRead:
    """One SSE request, read to its end (or ``stop_after`` frames, then disconnect)."""
    async with client.stream(method, url, **kwargs) as resp:
        assert resp.status_code == status, (resp.status_code, await resp.aread())
        assert resp.headers["content-type"].startswith("text/event-stream")
        return await read_sse(resp, stop_after=stop_after)


async def wait_until(condition: Callable[[], bool]) -> None:
    """Poll runtime state that offers no event to wait on; the caller's deadline bounds it."""
    while not condition():  # noqa: ASYNC110
        await trio.sleep(0.005)


def subscriber_count(sup: Supervisor) -> int:
    """How many subscriptions the runtime's log has open (every backend counts them)."""
    log = sup.log
    assert isinstance(log, LogBase), log
    return log.subscriber_count


@dataclass
class Harness:
    server: RunningServer
    store: TokenStore
    workspace: Path
    tmp: Path

    @property
    def url(self) -> str:
        return self.server.url

    def token(
        self, access: str = "workspace", account: str = "alice", workspace: Path | None = None
    ) -> str:
        return self.store.create(account, access, workspace or self.workspace)

    def client(self, token: str | None = None) -> httpx.AsyncClient:
        headers = {"x-token": token} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=10)

    async def sup(self, workspace: Path | None = None) -> Supervisor:
        sup = await self.server.front.runtimes.get(str((workspace or self.workspace).resolve()))
        assert sup is not None
        return sup

    async def wait_listeners(self, count: int, workspace: Path | None = None) -> None:
        """Until the workspace log has exactly ``count`` subscribers (the caller's deadline)."""
        sup = await self.sup(workspace)
        await wait_until(lambda: subscriber_count(sup) == count)


@asynccontextmanager
async def serve_harness(tmp_path: Path, **settings: Any) -> AsyncIterator[Harness]:
    """A server on 127.0.0.1:0 with the test script; ``settings`` override FrontSettings."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    store = TokenStore(tmp_path / "state")
    options: dict[str, Any] = {
        "keepalive": 0.3,
        "model": ScriptedModel({}, fallback=TEST_SCRIPT),
        "token_reload": 0.0,
        "limits": load_test_limits(streams=1000),  # tests of the limits set their own
    }
    options.update(settings)
    async with open_server(
        FrontSettings(tokens=store, **options), port=0, graceful_timeout=1.0
    ) as server:
        yield Harness(server, store, workspace, tmp_path)
