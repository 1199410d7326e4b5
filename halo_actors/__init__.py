"""halo_actors: an embeddable, event-sourced actor runtime for trees of AI-agent sessions."""

from __future__ import annotations

from .agent.scripted import Rule, Script, ScriptedCall, ScriptedModel, Step
from .core.errors import HaloError
from .core.log import EventFilter, MemoryEventLog, SqliteEventLog
from .runtime.embed import open_runtime
from .runtime.profiles import AgentProfile, Limits, Profiles
from .runtime.supervisor import Supervisor, open_supervisor

__version__ = "0.1.0"

__all__ = [
    "AgentProfile",
    "EventFilter",
    "HaloError",
    "Limits",
    "MemoryEventLog",
    "Profiles",
    "Rule",
    "Script",
    "ScriptedCall",
    "ScriptedModel",
    "SqliteEventLog",
    "Step",
    "Supervisor",
    "__version__",
    "open_runtime",
    "open_supervisor",
]
