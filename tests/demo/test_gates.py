"""gates: stopping an ancestor and reaching a foreign tree are refused, with exact answers."""

from __future__ import annotations

from pathlib import Path

from demo_harness import play_json

from halo_actors.core.events import MessageQueued, SessionStopped, ToolCalled, ToolReturned
from halo_actors.demo.scenarios.gates import GHOST


async def test_the_prober_is_refused_with_the_exact_answers(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "gates")

    alice, bob = played.session_named("alice"), played.session_named("bob")
    prober = played.session_named("alice>prober")
    results = {r.tool_use_id: r.result for r in played.events(ToolReturned, prober)}
    answers = [(c.tool_name, results[c.tool_use_id]) for c in played.events(ToolCalled, prober)]
    assert answers == [
        (
            "stop_session",
            f'{{"code":1,"error":"cannot stop an ancestor of your session ({alice}): '
            'it would wait for this very turn"}',
        ),
        ("query_session", f'{{"code":1,"error":"session {bob} not found"}}'),
        ("get_session_output", f'{{"code":1,"error":"session {bob} not found"}}'),
        ("query_session", f'{{"code":1,"error":"session {GHOST} not found"}}'),
    ]


async def test_nothing_reaches_the_foreign_tree_and_nothing_stops(tmp_path: Path) -> None:
    played = await play_json(tmp_path, "gates")

    bob = played.session_named("bob")
    assert [m.text for m in played.events(MessageQueued, bob)] == ["summarise my notes"]
    assert not played.events(SessionStopped)
    assert played.ok
