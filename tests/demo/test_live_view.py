"""The live demo view at 80×24 and 160×45, rendered to a fixed-size rich Console.

A tree in the state the hard-interrupt scenario shows (a runner in a long shell
command, a parallel call done, messages queued) plus a full feed is drawn the way
:meth:`LiveView.tick` draws it; the tests read the lines a terminal would show.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from rich.console import Console

from halo_actors.core import ids
from halo_actors.core.events import (
    AgentStarted,
    Event,
    MessageQueued,
    Record,
    RoundStarted,
    SessionCreated,
    TextStreamed,
    ToolCalled,
)
from halo_actors.demo.live import LiveView, hanging, layout_for
from halo_actors.demo.scenario import Check

LONG_COMMAND = "echo $$ > long.pid; sleep 60 && echo done"
SIZES = [(80, 24), (160, 45)]


def console(width: int, height: int) -> Console:
    return Console(
        file=io.StringIO(), width=width, height=height, force_terminal=True, color_system=None
    )


def records() -> Iterator[Record]:
    lead = ids.mint_root("demo")
    runner = ids.mint_child(lead, "runner")
    seq = iter(range(1, 1000))

    def at(session: str, event: Event) -> Record:
        return Record(seq=next(seq), session_id=session, ts=1_000, event=event)

    yield at(lead, SessionCreated(agent_id="lead", title="lead"))
    yield at(runner, SessionCreated(agent_id="runner", parent_id=lead, title="runner"))
    yield at(runner, MessageQueued(text="run the nightly job", source_session_id=lead))
    yield at(runner, RoundStarted(text="run the nightly job", drained=1))
    yield at(runner, AgentStarted())
    yield at(runner, TextStreamed(text="Running both steps in parallel."))
    yield at(
        runner,
        ToolCalled(tool_name="shell_exec", tool_use_id="t1", tool_input={"command": LONG_COMMAND}),
    )
    for n in range(20):
        yield at(
            lead, MessageQueued(text=f"status update number {n} from the user, please keep going")
        )


def region_lines(view: LiveView, out: Console) -> list[str]:
    lines = out.render_lines(view.render(), out.options, pad=False)
    return ["".join(segment.text for segment in line).rstrip() for line in lines]


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_the_region_fits_the_terminal_and_leaves_room_for_narration(
    width: int, height: int
) -> None:
    """Rule: the live view is good at 80×24 and at 160×45: the region never fills the
    screen (narration and checks printed above it stay readable; a region taller than
    the screen is what left a second top border on Ctrl-C)."""
    out = console(width, height)
    view = LiveView(io.StringIO(), console=out)
    for record in records():
        view.record(record)
    lines = region_lines(view, out)
    layout = layout_for(width, height)
    assert len(lines) <= height - layout.narration_room
    assert all(out.measure(line).maximum <= width for line in lines)
    assert sum("#" in line for line in lines) >= 3  # the feed still shows events


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_a_long_tool_call_is_shown_whole(width: int, height: int) -> None:
    """Rule: the tool column does not shrink a call to `shell_exec: sleep …`."""
    out = console(width, height)
    view = LiveView(io.StringIO(), console=out)
    for record in records():
        view.record(record)
    tree = "\n".join(region_lines(view, out)).split("events")[0]
    flat = " ".join(" ".join(line.strip("│ ").split()) for line in tree.splitlines())
    assert f"shell_exec: {LONG_COMMAND}" in flat.replace("│", " ").replace("  ", " ")
    assert "+20 queued" in flat or "20" in flat


def test_the_wide_view_keeps_its_streaming_column() -> None:
    out = console(160, 45)
    view = LiveView(io.StringIO(), console=out)
    for record in records():
        view.record(record)
    lines = region_lines(view, out)
    assert any("streaming" in line for line in lines)
    assert any("Running both steps in parallel." in line for line in lines)


def test_narration_wraps_with_a_hanging_indent() -> None:
    """Rule: narration that wraps at 80 columns is indented under its text."""
    out = console(80, 24)
    text = "the user tells the lead the long step is not needed, and the lead interrupts " * 2
    lines = [
        "".join(s.text for s in line).rstrip()
        for line in out.render_lines(hanging("»", text, "bold"), out.options, pad=False)
    ]
    assert len(lines) >= 2 and lines[0].startswith("» the user")
    assert all(line.startswith("  ") and line[2] != " " for line in lines[1:])


def test_checks_print_with_the_same_indent() -> None:
    buffer = io.StringIO()
    out = Console(file=buffer, width=80, height=24, color_system=None)
    view = LiveView(io.StringIO(), console=out)
    label = "the cut call is marked: [interrupted by user], and do-not-retry for the model " * 2
    view.check(Check(label, True))
    printed = buffer.getvalue().splitlines()
    assert printed[0].startswith("✓ the cut call is marked: [interrupted by user]")
    assert all(line.startswith("  ") for line in printed[1:])
