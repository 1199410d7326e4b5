"""An ACP client built on the official Python SDK (``agent-client-protocol``, import ``acp``).

``test_acp_official_sdk.py`` runs it as a subprocess, since the SDK is asyncio
and the tests are trio::

    HALO_ACTORS_TOKEN=… python sdk_client.py --port N --workspace DIR --stderr-dir DIR

Through the SDK's own ``spawn_agent_process`` it starts ``python -m halo_actors
acp --port N`` (the token passed in its environment, as an editor does), twice:

1. ``initialize``; ``session/new``; prompts ``hello`` (after an embedded
   resource and an image), ``run echo hi`` (a tool call) and ``think`` (a
   thought); a second session prompted ``run sleep 30`` and cancelled once its
   tool call shows; ``session/list``; a prompt for a session never opened;
2. a fresh adapter, as after an editor restart: ``initialize``;
   ``session/load`` of the first session (its replay); one more prompt on it.

It prints one JSON line on stdout, the summary the test asserts on, and exits
0; when a step raises, it prints what it had with ``"error"`` and exits 1.

The SDK validates a response by raising from the call, but a notification
that fails validation is only logged and dropped, and some malformed fields
are silently salvaged to their defaults. So conformance is checked three ways:
every message as it arrived (seen by a stream observer) is validated again
with the SDK's schema model and must dump back to itself (``mismatches``);
every ``session/update`` that arrived must have reached :meth:`Recorder.session_update`
(``updatesArrived`` == ``updatesDelivered``); and the SDK must log nothing at
WARNING or above, nor warn (``sdkLog``, ``warnings``).

Each adapter's stderr goes to a file in ``--stderr-dir``. The SDK closes the
adapter's stdin when its context exits (and escalates to terminate/kill after
2 s each); the summary carries each adapter's exit status, so the test can
tell it ended by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import traceback
import warnings
from asyncio.subprocess import Process
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    embedded_text_resource,
    image_block,
    resource_block,
    spawn_agent_process,
    text_block,
)
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.interfaces import Agent
from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanRemovedUpdate,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AvailableCommandsUpdate,
    ClientCapabilities,
    ConfigOptionUpdate,
    CreateElicitationResponse,
    CreateTerminalResponse,
    CurrentModeUpdate,
    DeniedOutcome,
    ElicitationMode,
    EnvVariable,
    Implementation,
    InitializeResponse,
    KillTerminalResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    SessionInfoUpdate,
    SessionNotification,
    TerminalOutputResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    UserMessageChunk,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)
from pydantic import BaseModel, ValidationError

TOKEN_ENV = "HALO_ACTORS_TOKEN"
DEADLINE = 25.0
"""Seconds for the whole run; the test's own budget is longer, so a hang still prints."""
STEP = 8.0
"""Seconds for any one wait (a prompt, the tool call before the cancel)."""
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
RESOURCE_URI = "file:///notes.md"

RESPONSES: dict[str, type[BaseModel]] = {
    "initialize": InitializeResponse,
    "session/new": NewSessionResponse,
    "session/load": LoadSessionResponse,
    "session/list": ListSessionsResponse,
    "session/prompt": PromptResponse,
}
"""The schema model of each answer this client can get."""

SessionUpdate = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
    | AgentPlanContentUpdate
    | AgentPlanRemovedUpdate
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)
Json = dict[str, Any]


def _dump(model: BaseModel) -> Json:
    """A model as its wire JSON: camelCase, only the fields that were given."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


class Recorder:
    """The SDK's ``Client``: keeps every update; any agent → client request is unexpected."""

    def __init__(self) -> None:
        self.updates: list[Json] = []
        """Each update delivered (``sessionId`` added), in order."""
        self.unexpected: list[str] = []
        """Client methods the agent called (it is documented to call none)."""
        self._changed = asyncio.Event()

    async def session_update(self, session_id: str, update: SessionUpdate, **kwargs: Any) -> None:
        self.updates.append({"sessionId": session_id, **_dump(update)})
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_update(self, session_id: str, kind: str) -> Json:
        """The first update of ``kind`` for ``session_id`` (old or new)."""
        while True:
            for update in self.updates:
                if update["sessionId"] == session_id and update["sessionUpdate"] == kind:
                    return update
            await self._changed.wait()

    def since(self, start: int, session_id: str) -> list[Json]:
        return [u for u in self.updates[start:] if u["sessionId"] == session_id]

    def _refuse(self, method: str) -> RequestError:
        self.unexpected.append(method)
        return RequestError.method_not_found(method)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self.unexpected.append("session/request_permission")
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        raise self._refuse("fs/write_text_file")

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        raise self._refuse("fs/read_text_file")

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        raise self._refuse("terminal/create")

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        raise self._refuse("terminal/output")

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        raise self._refuse("terminal/release")

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        raise self._refuse("terminal/wait_for_exit")

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse | None:
        raise self._refuse("terminal/kill")

    async def create_elicitation(
        self, message: str, mode: ElicitationMode, **kwargs: Any
    ) -> CreateElicitationResponse:
        raise self._refuse("elicitation/create")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        self.unexpected.append("elicitation/complete")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise self._refuse(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.unexpected.append(f"_{method}")

    def on_connect(self, conn: Agent) -> None:
        pass


@dataclass
class Wire:
    """One connection's raw traffic, as the SDK's stream observer saw it."""

    received: list[Json] = field(default_factory=list)
    sent_methods: dict[object, str] = field(default_factory=dict)
    """Request id → method of every request this client sent."""

    def observe(self, event: StreamEvent) -> None:
        message = event.message
        if event.direction is StreamDirection.INCOMING:
            self.received.append(message)
        elif "id" in message and "method" in message:
            self.sent_methods[message["id"]] = message["method"]

    def arrived(self, method: str) -> int:
        return sum(1 for m in self.received if m.get("method") == method)

    def mismatches(self) -> list[Json]:
        """Messages the schema refuses, or that do not survive a parse and dump unchanged."""
        found: list[Json] = []
        for message in self.received:
            model, payload = self._model_of(message)
            if message.get("jsonrpc") != "2.0" or model is None:
                found.append({"message": message, "problem": "not an expected JSON-RPC message"})
                continue
            try:
                again = _dump(model.model_validate(payload))
            except ValidationError as exc:
                found.append({"message": message, "problem": str(exc)})
                continue
            if again != payload:
                found.append({"message": message, "problem": "changed by parsing", "as": again})
        return found

    def _model_of(self, message: Json) -> tuple[type[BaseModel] | None, object]:
        if "method" in message:
            known = message["method"] == "session/update" and "id" not in message
            return (SessionNotification if known else None), message.get("params")
        if "error" in message:
            return _ErrorObject, message["error"]
        return RESPONSES.get(self.sent_methods.get(message.get("id"), "")), message.get("result")


class _ErrorObject(BaseModel):
    """JSON-RPC 2.0's error object (the SDK itself reads only ``code``, ``message``, ``data``)."""

    code: int
    message: str
    data: Any = None


@dataclass
class Run:
    port: int
    workspace: str
    stderr_dir: Path
    recorder: Recorder = field(default_factory=Recorder)
    wires: list[Wire] = field(default_factory=list)
    summary: Json = field(default_factory=dict)

    @asynccontextmanager
    async def adapter(self) -> AsyncIterator[tuple[ClientSideConnection, Process]]:
        """The next adapter, through ``spawn_agent_process`` (its stderr in a file of its own)."""
        wire = Wire()
        self.wires.append(wire)
        path = self.stderr_dir / f"sdk-adapter-{len(self.wires)}.stderr"
        with path.open("wb") as stderr:
            async with spawn_agent_process(
                self.recorder,
                sys.executable,
                "-m",
                "halo_actors",
                "acp",
                "--port",
                str(self.port),
                env={TOKEN_ENV: os.environ[TOKEN_ENV]},
                transport_kwargs={"stderr": stderr.fileno()},
                observers=[wire.observe],
            ) as (conn, process):
                yield conn, process

    async def initialize(self, conn: ClientSideConnection) -> InitializeResponse:
        return await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(),
            client_info=Implementation(name="halo-sdk-interop", version="0"),
        )

    async def prompt(self, conn: ClientSideConnection, session_id: str, *blocks: Any) -> Json:
        start = len(self.recorder.updates)
        async with asyncio.timeout(STEP):
            answer = await conn.prompt(session_id=session_id, prompt=list(blocks))
        return {"stopReason": answer.stop_reason, "updates": self.recorder.since(start, session_id)}

    async def first_adapter(self) -> str:
        """Everything but the load; returns the first session's id."""
        out = self.summary
        async with self.adapter() as (conn, process):
            init = await self.initialize(conn)
            out["initialize"] = _dump(init)
            first = (await conn.new_session(cwd=self.workspace, mcp_servers=[])).session_id
            second = (await conn.new_session(cwd=self.workspace, mcp_servers=[])).session_id
            out["sessions"] = [first, second]
            context = resource_block(
                embedded_text_resource(RESOURCE_URI, "some notes", mime_type="text/markdown")
            )
            image = image_block(PNG, "image/png")
            out["prompts"] = {
                "hello": await self.prompt(conn, first, context, image, text_block("hello")),
                "run echo hi": await self.prompt(conn, first, text_block("run echo hi")),
                "think": await self.prompt(conn, first, text_block("think")),
            }
            out["prompts"]["cancelled"] = await self._cancelled(conn, second)
            listed = await conn.list_sessions(cwd=self.workspace)
            out["list"] = _dump(listed)
            try:
                await conn.prompt(session_id="never-opened", prompt=[text_block("hello")])
            except RequestError as exc:
                out["unknownSession"] = {"code": exc.code, "message": str(exc)}
        out["adapterExits"] = [process.returncode]
        return first

    async def _cancelled(self, conn: ClientSideConnection, session_id: str) -> Json:
        """``run sleep 30``, cancelled once its tool call has shown."""
        start = len(self.recorder.updates)
        prompt = asyncio.create_task(
            conn.prompt(session_id=session_id, prompt=[text_block("run sleep 30")])
        )
        async with asyncio.timeout(STEP):
            await self.recorder.wait_update(session_id, "tool_call")
            await conn.cancel(session_id=session_id)
            answer = await prompt
        return {"stopReason": answer.stop_reason, "updates": self.recorder.since(start, session_id)}

    async def second_adapter(self, session_id: str) -> None:
        """A fresh adapter: load the first session, then prompt it once more."""
        out = self.summary
        async with self.adapter() as (conn, process):
            await self.initialize(conn)
            start = len(self.recorder.updates)
            async with asyncio.timeout(STEP):
                loaded = await conn.load_session(
                    cwd=self.workspace, session_id=session_id, mcp_servers=[]
                )
            out["load"] = {
                "answer": _dump(loaded),
                "updates": self.recorder.since(start, session_id),
            }
            out["prompts"]["after load"] = await self.prompt(
                conn, session_id, text_block("hello again")
            )
        out["adapterExits"].append(process.returncode)

    async def main(self) -> None:
        async with asyncio.timeout(DEADLINE):
            first = await self.first_adapter()
            await self.second_adapter(first)

    def conformance(self) -> None:
        out = self.summary
        out["mismatches"] = [m for wire in self.wires for m in wire.mismatches()]
        out["updatesArrived"] = sum(wire.arrived("session/update") for wire in self.wires)
        out["updatesDelivered"] = len(self.recorder.updates)
        out["unexpectedClientCalls"] = self.recorder.unexpected


class _Keep(logging.Handler):
    """Keeps every log record the SDK (or asyncio) writes at WARNING or above."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {record.getMessage()}")
        if record.exc_info and record.exc_info[1] is not None:
            self.lines.append(repr(record.exc_info[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--stderr-dir", type=Path, required=True)
    args = parser.parse_args()
    kept = _Keep()
    logging.getLogger().addHandler(kept)
    run = Run(args.port, args.workspace, args.stderr_dir)
    status = 0
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            asyncio.run(run.main())
        except Exception:
            run.summary["error"] = traceback.format_exc()
            status = 1
    run.conformance()
    run.summary["sdkLog"] = kept.lines
    run.summary["warnings"] = [f"{w.category.__name__}: {w.message}" for w in warned]
    print(json.dumps(run.summary))
    return status


if __name__ == "__main__":
    sys.exit(main())
