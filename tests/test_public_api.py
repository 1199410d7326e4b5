"""The public names are a contract: adding or removing one is a deliberate change, and
every exported name is described in ``docs/api.md``."""

from __future__ import annotations

import re
from pathlib import Path

import halo_actors

API_DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def test_public_names_are_pinned() -> None:
    assert sorted(halo_actors.__all__) == sorted(
        [
            "DEFAULT_TOOLS",
            "AgentDone",
            "AgentProfile",
            "AgentStarted",
            "AssistantReplied",
            "Compacted",
            "ContextMeasured",
            "ErrorRaised",
            "Event",
            "EventFilter",
            "EventLog",
            "FlagsChanged",
            "HaloError",
            "InvalidInput",
            "Limits",
            "MailboxDiscarded",
            "MailboxFolded",
            "MemoryEventLog",
            "Message",
            "MessageQueued",
            "AnthropicModel",
            "Model",
            "ModelConfigError",
            "ModelContextExceeded",
            "ModelEvent",
            "ModelFailed",
            "ModelRejected",
            "ModelRequest",
            "ModelTimeout",
            "Notified",
            "OpenAIModel",
            "ProfileError",
            "Profiles",
            "Record",
            "ReportSent",
            "RoundInfo",
            "RetryPolicy",
            "RoundStarted",
            "Rule",
            "Script",
            "ScriptedCall",
            "ScriptedModel",
            "SessionArchived",
            "SessionContext",
            "SessionCreated",
            "SessionDeleted",
            "SessionNotFound",
            "SessionStopped",
            "SessionUnavailable",
            "SqliteEventLog",
            "Step",
            "Stop",
            "Subscription",
            "SubscriptionClosed",
            "SubscriptionOverflow",
            "Supervisor",
            "TextDelta",
            "TextStreamed",
            "ThinkingDelta",
            "ThinkingStreamed",
            "Tool",
            "ToolCalled",
            "ToolError",
            "ToolOutput",
            "ToolReturned",
            "ToolUse",
            "TurnCompleted",
            "UsageReported",
            "__version__",
            "kind_of",
            "open_runtime",
            "open_supervisor",
            "tool",
        ]
    )
    for name in halo_actors.__all__:
        assert getattr(halo_actors, name) is not None


def documented_names() -> set[str]:
    """Names with an entry in docs/api.md: a ``### `name``` heading or a table row
    whose first cell is ```name```."""
    text = API_DOC.read_text()
    headings = re.findall(r"^### `([A-Za-z_][A-Za-z0-9_]*)`$", text, re.MULTILINE)
    rows = re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \|", text, re.MULTILINE)
    return {*headings, *rows}


def test_every_exported_name_is_documented_in_the_api_reference() -> None:
    """Rule: docs/api.md describes every exported name (a test fails on an undocumented one)."""
    undocumented = sorted(set(halo_actors.__all__) - documented_names())
    assert undocumented == [], f"add an entry to docs/api.md for: {', '.join(undocumented)}"


def test_the_api_reference_names_only_exported_things() -> None:
    stale = sorted(documented_names() - set(halo_actors.__all__))
    assert stale == [], f"docs/api.md documents names halo_actors does not export: {stale}"


def test_version_matches_the_package_metadata() -> None:
    from importlib.metadata import version

    assert halo_actors.__version__ == version("halo_actors")
