"""The append-only event log: one protocol, three backends, catch-up subscriptions.

``PostgresEventLog`` lives in ``.postgres`` and is not imported here: it needs the
``pg`` extra (psycopg), and the embedded default needs no database.
"""

from __future__ import annotations

from .base import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_SUBSCRIBER_BUFFER,
    MAX_BACKLOG,
    EventLog,
    LogBase,
)
from .fanout import Subscription
from .filter import EVERYTHING, EventFilter
from .index import SessionSummary
from .memory import MemoryEventLog
from .sqlite import SqliteEventLog

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_SUBSCRIBER_BUFFER",
    "EVERYTHING",
    "MAX_BACKLOG",
    "EventFilter",
    "EventLog",
    "LogBase",
    "MemoryEventLog",
    "SessionSummary",
    "SqliteEventLog",
    "Subscription",
]
