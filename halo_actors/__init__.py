"""halo_actors: an embeddable, event-sourced actor runtime for trees of AI-agent sessions.

Everything an embedding program needs is importable from here, and every name is
described in ``docs/api.md`` (a test fails on an undocumented one).
"""

from __future__ import annotations

from .agent.model import (
    Model,
    ModelEvent,
    ModelFailed,
    ModelRejected,
    ModelRequest,
    ModelTimeout,
    RoundInfo,
    Stop,
    TextDelta,
    ThinkingDelta,
    ToolUse,
)
from .agent.scripted import Rule, Script, ScriptedCall, ScriptedModel, Step
from .core.conversation import Message
from .core.errors import (
    HaloError,
    InvalidInput,
    ProfileError,
    SessionNotFound,
    SessionUnavailable,
    SubscriptionClosed,
    SubscriptionOverflow,
)
from .core.events import (
    AgentDone,
    AgentStarted,
    AssistantReplied,
    Compacted,
    ContextMeasured,
    ErrorRaised,
    Event,
    FlagsChanged,
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
    Notified,
    Record,
    ReportSent,
    RoundStarted,
    SessionArchived,
    SessionCreated,
    SessionDeleted,
    SessionStopped,
    TextStreamed,
    ThinkingStreamed,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
    UsageReported,
    kind_of,
)
from .core.log import EventFilter, EventLog, MemoryEventLog, SqliteEventLog, Subscription
from .runtime.embed import open_runtime
from .runtime.profiles import DEFAULT_TOOLS, AgentProfile, Limits, Profiles
from .runtime.supervisor import Supervisor, open_supervisor
from .tools.base import Tool, ToolOutput
from .tools.custom import SessionContext, ToolError, tool

__version__ = "0.1.0"

__all__ = [
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
    "Model",
    "ModelEvent",
    "ModelFailed",
    "ModelRejected",
    "ModelRequest",
    "ModelTimeout",
    "Notified",
    "ProfileError",
    "Profiles",
    "Record",
    "ReportSent",
    "RoundInfo",
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
