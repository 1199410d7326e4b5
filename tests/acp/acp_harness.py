"""The ACP tests' rig: a real server, the fault proxy, the adapter as a real subprocess.

:class:`AdapterProcess` speaks JSON-RPC to ``python -m halo_actors acp`` over its
stdin/stdout pipes and keeps every line the adapter wrote, in order, so a test
can check what came before an answer. A stdout line that is not a JSON-RPC
message is kept apart (``stray``) and fails the test at exit. The adapter's
stderr goes to a file in the test's tmp directory.

The server's model is :func:`acp_model`: the HTTP tests' script plus a few rules
that shape tool calls and errors, behind :class:`BlankIds`, which empties every
tool-use id spelled ``blank…`` (as some model APIs send none).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trio
from fault_proxy import FaultProxy
from web_client import TEST_SCRIPT, Harness

from halo_actors.agent.model import ModelEvent, ModelRequest, ToolUse
from halo_actors.agent.scripted import Rule, Script, ScriptedCall, ScriptedModel, Step
from halo_actors.runtime.supervisor import Supervisor

LONG_COMMAND = "echo " + "x" * 120


def _call(name: str, **tool_input: object) -> ScriptedCall:
    return ScriptedCall(name=name, input=tool_input)


ACP_SCRIPT = Script(
    rules=(
        Rule(
            match=r"^tools$",
            steps=(
                Step(calls=(_call("file_write", path="notes.txt", content="hello"),)),
                Step(
                    calls=(
                        _call("file_read", path="notes.txt"),
                        _call("glob", pattern="*.txt"),
                        _call("grep", pattern="hel+o"),
                        _call("file_list", path="."),
                    )
                ),
                Step(
                    calls=(
                        _call("file_edit", path="notes.txt", old_string="hello", new_string="hi"),
                        _call("web_fetch", url="https://example.org/"),
                        _call("mystery_tool"),
                    )
                ),
                Step(text="all tools ran"),
            ),
        ),
        Rule(
            match=r"^long$",
            steps=(
                Step(calls=(ScriptedCall(name="shell_exec", input={"command": LONG_COMMAND}),)),
                Step(text="ok"),
            ),
        ),
        Rule(
            match=r"^blank$",
            steps=(
                Step(calls=(ScriptedCall(name="file_list", input={"path": "."}, id="blank"),)),
                Step(text="listed"),
            ),
        ),
        Rule(match=r"^fail$", steps=(Step(text="partial ", fail="the model gave up"),)),
        *TEST_SCRIPT.rules,
    )
)


class BlankIds:
    """The scripted model, except that tool-use ids spelled ``blank…`` reach the runtime empty."""

    def __init__(self, inner: ScriptedModel) -> None:
        self._inner = inner

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        events = self._inner.stream(request)
        try:
            async for event in events:
                if isinstance(event, ToolUse) and event.id.startswith("blank"):
                    event = ToolUse("", event.name, event.input)
                yield event
        finally:  # an instant step's stream has nothing to close (no ``aclose``)
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()


def acp_model() -> BlankIds:
    return BlankIds(ScriptedModel({}, fallback=ACP_SCRIPT))


Message = dict[str, object]


def at(value: object, *path: str | int) -> object:
    """``value[path[0]][path[1]]…`` in decoded JSON (``at(answer, "error", "code")``),
    each step checked: a key needs an object there, an index a list."""
    for key in path:
        if isinstance(key, int):
            assert isinstance(value, list), (value, key)
            value = value[key]
        else:
            assert isinstance(value, dict), (value, key)
            value = value[key]
    return value


def text_at(value: object, *path: str | int) -> str:
    """:func:`at`, checked to be a string."""
    found = at(value, *path)
    assert isinstance(found, str), (found, path)
    return found


@dataclass
class AdapterProcess:
    process: trio.Process
    stderr_path: Path
    messages: list[Message] = field(default_factory=list)
    """Every JSON-RPC message the adapter wrote, in order."""
    stray: list[bytes] = field(default_factory=list)
    """stdout lines that were not JSON-RPC messages (must stay empty)."""
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _arrived: trio.Event = field(default_factory=trio.Event)

    # --- sending -----------------------------------------------------------------------

    async def send_line(self, line: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(line + b"\n")

    async def send(self, message: Message) -> None:
        await self.send_line(json.dumps(message).encode())

    async def start(self, method: str, params: Message | None = None) -> int:
        """Send a request without waiting; ``await answer(id)`` later."""
        request_id = next(self._ids)
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return request_id

    async def request(self, method: str, params: Message | None = None) -> Message:
        """The whole answer: ``{"result": …}`` or ``{"error": …}``."""
        return await self.answer(await self.start(method, params))

    async def result(self, method: str, params: Message | None = None) -> object:
        answer = await self.request(method, params)
        assert "result" in answer, answer
        return answer["result"]

    async def notify(self, method: str, params: Message) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    # --- sessions, prompts ---------------------------------------------------------------

    async def new_session(self) -> str:
        result = await self.result("session/new", {"cwd": "/", "mcpServers": []})
        assert isinstance(result, dict)
        return str(result["sessionId"])

    async def prompt(self, session_id: str, *blocks: Message | str) -> Message:
        request_id = await self.start_prompt(session_id, *blocks)
        return await self.answer(request_id)

    async def start_prompt(self, session_id: str, *blocks: Message | str) -> int:
        content = [{"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]
        return await self.start("session/prompt", {"sessionId": session_id, "prompt": content})

    # --- reading -------------------------------------------------------------------------

    async def answer(self, request_id: int) -> Message:
        found = await self.wait_for(lambda m: m.get("id") == request_id and "method" not in m)
        return found

    def position(self, request_id: int) -> int:
        """Where the answer to ``request_id`` stands among the adapter's messages."""
        return next(
            i
            for i, m in enumerate(self.messages)
            if m.get("id") == request_id and "method" not in m
        )

    def updates(self, session_id: str | None = None, before: int | None = None) -> list[Message]:
        """``session/update`` payloads (of one session; written before message ``before``)."""
        out = []
        for message in self.messages[:before]:
            params = message.get("params")
            if not (message.get("method") == "session/update" and isinstance(params, dict)):
                continue
            if session_id is None or params.get("sessionId") == session_id:
                out.append(params["update"])
        return out

    def text(self, session_id: str, kind: str = "agent_message_chunk") -> str:
        return "".join(
            str(at(u, "content", "text"))
            for u in self.updates(session_id)
            if u["sessionUpdate"] == kind
        )

    async def wait_for(self, condition: Callable[[Message], bool]) -> Message:
        """The first message (old or new) for which ``condition`` holds."""
        seen = 0
        while True:
            for message in self.messages[seen:]:
                if condition(message):
                    return message
            seen = len(self.messages)
            await self._arrived.wait()

    async def wait_text(self, session_id: str, fragment: str) -> None:
        while fragment not in self.text(session_id):
            await self._arrived.wait()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    async def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        while chunk := await self.process.stdout.receive_some(65536):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self._keep(line)
        if buffer:
            self._keep(buffer)

    def _keep(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self.stray.append(line)
            return
        if isinstance(message, dict) and message.get("jsonrpc") == "2.0":
            self.messages.append(message)
        else:
            self.stray.append(line)
        self._arrived.set()
        self._arrived = trio.Event()


EXIT_WAIT = 5.0
"""Seconds the adapter gets to exit after its stdin closes, before it is killed."""


ADAPTER = (sys.executable, "-m", "halo_actors", "acp")


@asynccontextmanager
async def open_adapter(
    command: list[str],
    *,
    stderr_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[AdapterProcess]:
    """Run ``command`` (an adapter) with piped stdin/stdout; closed and reaped on exit."""
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )
    adapter = AdapterProcess(process, stderr_path)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(adapter._read_stdout)
            yield adapter
            await close_adapter(adapter)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()  # only our own child, by its pid
            await process.wait()
    assert adapter.stray == [], f"stdout carried non-protocol lines: {adapter.stray}"


async def close_adapter(adapter: AdapterProcess) -> int:
    """Close its stdin and wait for it to exit (killed after :data:`EXIT_WAIT`)."""
    assert adapter.process.stdin is not None
    await adapter.process.stdin.aclose()
    with trio.move_on_after(EXIT_WAIT):
        return await adapter.process.wait()
    adapter.process.kill()
    await adapter.process.wait()
    raise AssertionError(f"the adapter did not exit within {EXIT_WAIT} s of stdin closing")


@dataclass
class Rig:
    """One test's world: the server (``harness``), the proxy in front of it, adapters."""

    harness: Harness
    proxy: FaultProxy
    tmp: Path
    _started: itertools.count[int] = field(default_factory=itertools.count)

    def token(self, access: str = "workspace", account: str = "alice") -> str:
        return self.harness.token(access, account)

    def adapter(
        self,
        *args: str,
        token: str | None = None,
        direct: bool = False,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> AbstractAsyncContextManager[AdapterProcess]:
        """An adapter through the proxy (``direct``: straight to the server).

        ``token=""`` passes no ``--token`` at all.
        """
        port = self.harness.server.port if direct else self.proxy.port
        chosen = self.token() if token is None else token
        command = [*ADAPTER, "--port", str(port), "--reconnect-delay", "0.05"]
        command += [*(["--token", chosen] if chosen else []), *args]
        return self.run(command, env, cwd)

    def run(
        self, command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> AbstractAsyncContextManager[AdapterProcess]:
        """Any adapter command line (e.g. one copied from the docs)."""
        stderr_path = self.tmp / f"adapter-{next(self._started)}.stderr"
        return open_adapter(command, stderr_path=stderr_path, env=env, cwd=cwd)

    async def sup(self) -> Supervisor:
        return await self.harness.sup()
