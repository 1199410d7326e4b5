"""The append-only event log: one protocol, two backends, catch-up subscriptions."""

from __future__ import annotations

from .base import DEFAULT_MAX_EVENT_BYTES, DEFAULT_SUBSCRIBER_BUFFER, EventLog, LogBase
from .fanout import Subscription
from .filter import EVERYTHING, EventFilter
from .memory import MemoryEventLog
from .sqlite import SqliteEventLog

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_SUBSCRIBER_BUFFER",
    "EVERYTHING",
    "EventFilter",
    "EventLog",
    "LogBase",
    "MemoryEventLog",
    "SqliteEventLog",
    "Subscription",
]
