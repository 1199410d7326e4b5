"""Small builders the scenario scripts share: tool calls, profiles, report parsing.

Scripts are how a scenario makes its tree do what it shows: each agent profile
has its own :class:`~halo_actors.agent.scripted.Script`, and a rule's steps ask
for real tool calls (shell commands, session tools) with real timing.
"""

from __future__ import annotations

from ...agent.scripted import ScriptedCall
from ...core.conversation import TextBlock
from ...core.events import AssistantReplied
from ...runtime.profiles import AgentProfile, Limits
from ...runtime.rounds import FINAL_HEADER, INTERIM_HEADER, SIBLINGS_RUNNING

FROM_SESSION = r"^\(from: session [^)]+\) "
"""How a round from another session begins (``merge_round`` prefixes it)."""


def call(name: str, **inputs: object) -> ScriptedCall:
    return ScriptedCall(name=name, input=dict(inputs))


def shell(command: str) -> ScriptedCall:
    return call("shell_exec", command=command)


def start(task: str, *, agent: str, label: str) -> ScriptedCall:
    return call("start_session", task=task, agent=agent, label=label)


def profile(name: str, *team: str, description: str = "", kill_grace: float = 2.0) -> AgentProfile:
    """An agent profile that may start the agents of ``team`` as sub-sessions."""
    return AgentProfile(
        name=name,
        description=description,
        team=team,
        limits=Limits(kill_grace=kill_grace, report_cap=600),
    )


def pace(seconds: float) -> str:
    """A ``sleep`` argument for a shell command (``sleep 0.5``), never below 10 ms."""
    return f"{max(seconds, 0.01):.2f}"


def reports_in(text: str) -> tuple[int, int, bool]:
    """(final reports, interim reports, whether the last final says others still run)."""
    finals = text.split(FINAL_HEADER)
    last_final = finals[-1] if len(finals) > 1 else ""
    return len(finals) - 1, text.count(INTERIM_HEADER), SIBLINGS_RUNNING in last_final


def text_of(reply: AssistantReplied) -> str:
    """The text blocks of one model response."""
    return "".join(b.text for b in reply.content if isinstance(b, TextBlock))
