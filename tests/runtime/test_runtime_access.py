"""Access levels on sessions: recorded at creation, inherited, never raised; what each allows.

The runtime half of ``docs/security.md``: the level lives in ``session_created``, a
sub-session never has more than its parent, a profile may only lower it, and a
read-only session is never even told about the shell or the writing file tools.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import trio
from runtime_harness import BUDGET, SHELL_BUDGET, Rule, Step, call, running, shell
from sandbox_check import needs_sandbox

from halo_actors.agent.model import ModelEvent, ModelRequest
from halo_actors.agent.scripted import Script, ScriptedModel
from halo_actors.core.access import Access
from halo_actors.core.events import MessageQueued, SessionCreated, decode_event, encode_event
from halo_actors.core.log import MemoryEventLog
from halo_actors.runtime.embed import open_runtime
from halo_actors.runtime.profiles import AgentProfile, Profiles
from halo_actors.runtime.supervisor import open_supervisor
from halo_actors.tools.files import Workspace


class ToolListModel(ScriptedModel):
    """The ScriptedModel, remembering which tools each turn request offered."""

    def __init__(self, script: Script) -> None:
        super().__init__({"default": script})
        self.offered: list[set[str]] = []

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        if request.purpose == "turn":
            self.offered.append({spec.name for spec in request.tools})
        async for item in super().stream(request):
            yield item


async def test_access_is_recorded_in_session_created_and_children_inherit_it(
    tmp_path: Path,
) -> None:
    """Rule: a session's capabilities follow the access level of whoever created it,
    recorded in its session_created event and inherited by sub-sessions."""
    spawn = Rule(match="spawn", steps=(Step(calls=(call("start_session", task="t"),)),))
    answer = Rule(steps=(Step(text="ok"),))
    with trio.fail_after(BUDGET):
        async with running(tmp_path, spawn, answer) as rt:
            sid = await rt.sup.create_session(namespace="t", access="readonly")
            await rt.sup.send(sid, "spawn")
            await rt.sup.wait_idle(sid)
            created = await rt.events(sid, SessionCreated)
            (child,) = rt.sup.children(sid)
            child_created = await rt.events(child, SessionCreated)
    assert created[0].access == "readonly"
    assert child_created[0].access == "readonly"
    assert rt.sup.access_of(child) == "readonly"


async def test_a_sub_session_never_gets_more_than_its_parent(tmp_path: Path) -> None:
    """Rule: never raised: a child named with a stronger level keeps its parent's."""
    with trio.fail_after(BUDGET):
        async with running(tmp_path) as rt:
            parent = await rt.sup.create_session("t_1_a", access="workspace")
            child = await rt.sup.create_session(
                "t_1_a>kid", parent_id=parent, access="full", agent_id="default"
            )
            assert rt.sup.access_of(child) == "workspace"
            again = await rt.sup.create_session(parent, access="full")  # exists: unchanged
            assert again == parent and rt.sup.access_of(parent) == "workspace"


async def test_a_read_only_session_is_not_offered_the_shell_or_writing_tools(
    tmp_path: Path,
) -> None:
    """Rule: readonly: no shell tool at all (absent from its tool list); file tools
    read-only."""
    (tmp_path / "notes.txt").write_text("keep me")
    steps = (
        Step(calls=(shell("echo pwned > pwned.txt"),)),
        Step(calls=(call("file_write", path="notes.txt", content="changed"),)),
        Step(calls=(call("file_read", path="notes.txt"),)),
        Step(text="done"),
    )
    model = ToolListModel(Script(rules=(Rule(steps=steps),)))
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, model=model) as rt:
            ro = await rt.sup.create_session(namespace="ro", access="readonly")
            await rt.sup.send(ro, "go")
            await rt.sup.wait_idle(ro)
            results = await rt.results(ro)
    assert all("shell_exec" not in offered for offered in model.offered)
    assert all({"file_write", "file_edit"}.isdisjoint(offered) for offered in model.offered)
    assert {"file_read", "grep", "continue_task"} <= model.offered[0]
    shell_result, write_result, read_result = results
    assert shell_result.is_error and "unknown tool 'shell_exec'" in shell_result.result
    assert write_result.is_error and "unknown tool 'file_write'" in write_result.result
    assert read_result.result == "keep me"
    assert not (tmp_path / "pwned.txt").exists()
    assert (tmp_path / "notes.txt").read_text() == "keep me"


@needs_sandbox()
async def test_a_sandboxing_profile_lowers_a_full_session(tmp_path: Path) -> None:
    """Rule: embedders choose per profile (`sandbox = "workspace"`): a full session of
    that profile runs its commands in the sandbox."""
    profiles = Profiles({"default": AgentProfile(name="default", sandbox="workspace")})
    (tmp_path / ".halo").mkdir()
    (tmp_path / ".halo" / "events.db").write_text("state")
    rule = Rule(steps=(Step(calls=(shell("ls -A .halo; echo end"),)), Step(text="ok")))
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, rule, profiles=profiles) as rt:
            sid = await rt.sup.create_session(namespace="emb", access="full")
            await rt.sup.send(sid, "go")
            await rt.sup.wait_idle(sid)
            (result,) = await rt.results(sid)
    assert result.result.startswith("end\n"), result.result  # .halo is empty in there


async def test_the_embedder_default_is_full_and_unrecorded_sessions_take_the_runtime_default(
    tmp_path: Path,
) -> None:
    """Rule: new field with a default (schema evolution): a session_created written
    before levels existed decodes without one and gets the runtime's default level;
    an embedding program's default is `full` (documented)."""
    old = b'{"type":"session_created","agentId":"default"}'
    decoded = decode_event(old)
    assert isinstance(decoded, SessionCreated) and decoded.access is None
    assert b"access" not in encode_event(SessionCreated(agent_id="default"))
    log = MemoryEventLog()
    await log.append("old_1_a", decoded, MessageQueued(text="left over"))
    levels: tuple[Access, ...] = ("full", "workspace")
    for default in levels:
        model = ScriptedModel({"default": Script(rules=(Rule(steps=(Step(text="ok"),)),))})
        with trio.fail_after(BUDGET):
            async with open_supervisor(
                log, model, workspace=Workspace(tmp_path), access=default
            ) as sup:
                assert sup.access_of("old_1_a") == default
                await sup.wait_idle("old_1_a")
                fresh = await sup.create_session(namespace="emb")
                assert sup.access_of(fresh) == default
    async with open_runtime(tmp_path / "embedded", durable=False) as sup:
        assert sup.access_of(await sup.create_session(namespace="emb")) == "full"
