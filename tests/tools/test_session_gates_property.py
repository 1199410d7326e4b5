"""Property: random session-tool calls from random sessions never cross a tree.

Hypothesis builds two or three trees (roots with children and grandchildren, of
different agent profiles) and then plays a list of calls: a random caller, a
random session tool, a random target (itself, an ancestor, a descendant, any
session of its tree, a session of another tree, an unknown id, an unsafe id).
After every call the runtime is let settle and we check (``docs/design/gates.md``):

- no other tree got a single new log record, and no lifecycle there changed
  (never stopped, archived, queried, interrupted);
- an answer never names a session or an output of another tree, except the
  very id the caller asked about, inside the standard "not found" answer;
- every target outside the caller's visible tree gets exactly that answer;
- ``stop_session`` / ``archive_session`` of the caller or an ancestor is refused;
- ``start_session`` succeeds exactly for profiles of the caller's team;
- no call hangs (each runs under ``trio.fail_after``).

The test is a plain function that calls ``trio.run`` per example: pytest-trio's
``trio_mode`` only wraps ``async def`` tests, and ``@given`` needs a sync one.
Calls are made one at a time, directly through ``call_tool``.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from halo_actors.agent.scripted import Rule, Script, ScriptedModel, Step
from halo_actors.core import ids
from halo_actors.core.log import EventFilter, MemoryEventLog
from halo_actors.core.state import Lifecycle
from halo_actors.runtime.profiles import AgentProfile, Profiles
from halo_actors.runtime.supervisor import Supervisor, open_supervisor
from halo_actors.tools.base import ToolContext, ToolOutput, call_tool
from halo_actors.tools.files import Workspace
from halo_actors.tools.registry import BUILTIN_TOOLS

CALL_BUDGET = 5.0  # seconds one call (and the settling after it) may take
AGENTS = ("default", "lead", "helper", "nobody")
TEAMS = {"default": ("default", "helper"), "lead": ("helper",), "helper": ()}
"""Who may start whom; ``nobody`` has no profile at all."""
PROFILES = Profiles({name: AgentProfile(name=name, team=team) for name, team in TEAMS.items()})
SCRIPT = Script(
    rules=(
        Rule(match=r"(secret-t\d)", build=lambda found: (Step(text=f"out {found[1]}"),)),
        Rule(steps=(Step(text="ok"),)),
    )
)
TOOLS = (
    "stop_session",
    "archive_session",
    "query_session",
    "interrupt_session",
    "get_session_output",
    "list_sessions",
    "start_session",
)
TARGETS = ("self", "ancestor", "descendant", "own_tree", "foreign", "unknown", "unsafe")
UNSAFE = ("", "../x", "a b", ">x", "x>", "a" * 200, "nul\x00", "é", "x;--")


@dataclass(frozen=True)
class Op:
    caller: int
    tool: str
    target_kind: str
    target: int
    agent: str
    interrupt: bool


tree_shapes = st.lists(
    st.tuples(
        st.sampled_from(("default", "lead", "helper")),
        st.lists(st.integers(0, 2), max_size=2),  # grandchildren per child
    ),
    min_size=2,
    max_size=3,
)
ops = st.lists(
    st.builds(
        Op,
        caller=st.integers(0, 99),
        tool=st.sampled_from(TOOLS),
        target_kind=st.sampled_from(TARGETS),
        target=st.integers(0, 99),
        agent=st.sampled_from(AGENTS),
        interrupt=st.booleans(),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=tree_shapes, plan=ops)
def test_random_session_tool_calls_never_cross_a_tree(
    shapes: list[tuple[str, list[int]]], plan: list[Op]
) -> None:
    with tempfile.TemporaryDirectory() as workspace:
        trio.run(play, shapes, plan, workspace)


# --- one example ---------------------------------------------------------------------


@dataclass
class Game:
    sup: Supervisor
    log: MemoryEventLog
    tags: dict[str, str]
    """Root id -> the tag ``t<i>`` every output of that tree carries (``secret-t<i>``)."""

    def roots(self) -> list[str]:
        return list(self.tags)

    def tag_of(self, session_id: str) -> str:
        return self.tags[ids.root_of(session_id)]

    async def snapshot(self, root: str) -> tuple[list[int], dict[str, Lifecycle]]:
        """The tree's record sequence numbers and every lifecycle in it."""
        records = [r.seq for r in await self.log.read(EventFilter(tree=root))]
        lifecycles = {
            s.session_id: s.lifecycle
            for s in self.sup.sessions()
            if ids.same_tree(s.session_id, root)
        }
        return records, lifecycles

    async def settle(self) -> None:
        """Until no run is active and none is about to start (reports follow a run's end)."""
        while True:
            for root in self.roots():
                await self.sup.wait_idle(root)
            await trio.testing.wait_all_tasks_blocked()
            if not any(self.sup.is_running(s.session_id) for s in self.sup.sessions()):
                return


async def play(shapes: list[tuple[str, list[int]]], plan: list[Op], workspace: str) -> None:
    log = MemoryEventLog()
    model = ScriptedModel({}, fallback=SCRIPT)
    async with open_supervisor(
        log, model, workspace=Workspace(workspace), profiles=PROFILES
    ) as sup:
        game = Game(sup, log, {})
        with trio.fail_after(CALL_BUDGET):
            for index, (agent, children) in enumerate(shapes):
                await build_tree(game, f"t{index}", agent, children)
            await game.settle()
        for op in plan:
            await check_one_call(game, op)


async def build_tree(game: Game, tag: str, agent: str, children: list[int]) -> None:
    root = await game.sup.create_session(namespace=f"web_{tag}", agent_id=agent)
    game.tags[root] = tag
    for grandchildren in children:
        child = await game.sup.start_child(root, "default", f"secret-{tag}", "child")
        for _ in range(grandchildren):
            await game.sup.start_child(child, "helper", f"secret-{tag}", "grand")


def ancestors(session_id: str) -> list[str]:
    found = []
    parent = ids.parent_of(session_id)
    while parent is not None:
        found.append(parent)
        parent = ids.parent_of(parent)
    return found


def pick_target(sup: Supervisor, caller: str, op: Op) -> str:
    everyone = [s.session_id for s in sup.sessions()]
    mine = [s for s in everyone if ids.same_tree(s, caller)]
    foreign = [s for s in everyone if not ids.same_tree(s, caller)]
    kinds = {
        "self": [caller],
        "ancestor": ancestors(caller) or [caller],
        "descendant": [s for s in mine if ids.is_in_subtree(s, caller) and s != caller] or [caller],
        "own_tree": mine,
        "foreign": foreign,
        "unknown": [
            ids.child_id(ids.root_of(caller), "ghost_000000"),
            ids.child_id(foreign[0], "ghost_000000"),
            "web_t9_1700000000000_deadbeef",
        ],
        "unsafe": [*UNSAFE, f"{ids.root_of(caller)}>..", f"{caller}> x"],
    }
    choices = kinds[op.target_kind]
    return choices[op.target % len(choices)]


def args_of(op: Op, target: str, tag: str) -> dict[str, object]:
    if op.tool == "list_sessions":
        return {}
    if op.tool == "start_session":
        return {"task": f"secret-{tag}", "agent": op.agent}
    if op.tool == "query_session":
        return {"session_id": target, "message": f"secret-{tag}", "interrupt": op.interrupt}
    return {"session_id": target}


async def check_one_call(game: Game, op: Op) -> None:
    sup = game.sup
    callers = [s.session_id for s in sup.sessions() if s.lifecycle != "archived"]
    caller = callers[op.caller % len(callers)]
    target = pick_target(sup, caller, op)
    others = [root for root in game.roots() if not ids.same_tree(root, caller)]
    before = {root: await game.snapshot(root) for root in others}
    visible = sup.exists(target) and sup.is_live(target) and ids.same_tree(target, caller)
    sessions_before = {s.session_id for s in sup.sessions()}

    ctx = ToolContext(
        session_id=caller,
        agent_id=sup.state(caller).agent_id,
        workspace=sup.workspace,
        tree=sup,
        turn=sup.actor(caller),
    )
    with trio.fail_after(CALL_BUDGET):
        out = await call_tool(BUILTIN_TOOLS, ctx, op.tool, args_of(op, target, game.tag_of(caller)))
        await game.settle()

    for root in others:
        assert await game.snapshot(root) == before[root], f"{op} touched tree {root}"
    assert_no_leak(game, caller, target, out)
    expect_answer(sup, op, caller, target, visible, out, sessions_before)


def assert_no_leak(game: Game, caller: str, target: str, out: ToolOutput) -> None:
    """No foreign id or output in the answer (the caller's own guess is echoed back)."""
    text = out.text.replace(target, "<target>") if target else out.text
    for root in game.roots():
        if not ids.same_tree(root, caller):
            assert root not in text
            assert f"secret-{game.tags[root]}" not in text


def expect_answer(
    sup: Supervisor,
    op: Op,
    caller: str,
    target: str,
    visible: bool,
    out: ToolOutput,
    sessions_before: set[str],
) -> None:
    answer = json.loads(out.text)
    if op.tool == "list_sessions":
        listed = [s["sessionId"] for s in answer["sessions"]]
        root = ids.root_of(caller)
        assert listed == [s for s in sup.subtree(root) if sup.is_live(s)]
    elif op.tool == "start_session":
        created = {s.session_id for s in sup.sessions()} - sessions_before
        if op.agent in TEAMS[sup.state(caller).agent_id]:
            assert answer["code"] == 0 and created == {answer["sessionId"]}
            assert ids.parent_of(answer["sessionId"]) == caller
        else:
            assert out.is_error and answer["code"] == 1 and created == set()
    elif not visible:
        assert out.is_error
        assert answer == {"code": 1, "error": f"session {target} not found"}
        if ids.is_safe_session_id(target):
            assert out.text == '{"code":1,"error":"session ' + target + ' not found"}'
    elif op.tool in ("stop_session", "archive_session") and ids.is_self_or_ancestor(target, caller):
        assert out.is_error and answer["error"].startswith(("cannot stop ", "cannot archive "))
        assert sup.is_live(target)
    elif op.tool == "query_session" and target == caller:
        assert answer == {"code": 1, "error": "cannot query your own session"}
    else:
        assert (answer["code"], answer["sessionId"]) == (0, target), answer
        if op.tool == "get_session_output":
            assert answer["output"] == sup.output(target)
