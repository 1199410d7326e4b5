"""The one error hierarchy of halo_actors.

Every error the runtime raises on purpose is a ``HaloError``; fronts map these
(and only these) to HTTP statuses or JSON-RPC codes, each in one table. Anything
else reaching a front is a bug and is reported as an internal error without a
traceback.

    HaloError
    ├── InvalidInput                 bad input from a caller; nothing was changed
    │   ├── UnsafeSessionId          an id that fails the safe-segment rule
    │   ├── EventTooLarge            an encoded event over the store's cap
    │   └── ProfileError             a broken agent profile (names file and field)
    ├── StoreClosed                  the event log was closed (or is open read-only)
    ├── StoreFailed                  an append could not be made durable; nothing of it stored
    │   └── Fenced                   this node no longer owns the tree (stale lease epoch)
    ├── SubscriptionClosed           a live subscription ended; resume from ``resume_after``
    │   └── SubscriptionOverflow     the subscriber fell behind its bounded buffer
    ├── SessionNotFound              no such session (or not visible to the caller)
    ├── SessionUnavailable           stopped for good: archived or deleted
    ├── GateRefused                  a tree-scoped gate refused a tool call
    └── WorkspaceError               a file operation outside the rules
        ├── PathNotAccessible        escapes the workspace or touches runtime state
        └── FileProblem              missing, binary, too large, not unique, …
"""

from __future__ import annotations


class HaloError(Exception):
    """Base of every error halo_actors raises on purpose."""


class InvalidInput(HaloError, ValueError):
    """The caller sent something we refuse; no state was changed."""


class UnsafeSessionId(InvalidInput):
    """A session id (or one of its segments) fails the safe-segment rule."""


class EventTooLarge(InvalidInput):
    """An event's encoded size is over the store's configured cap."""


class ProfileError(InvalidInput):
    """An agent profile file is broken; the message names the file and the field."""


class StoreClosed(HaloError):
    """The event log has been closed; no append or read is possible."""


class StoreFailed(HaloError):
    """An append could not be made durable: a commit failed and the log stopped (fail-stop).

    Nothing of that append, nor of any later one, was stored or shown to a reader; the
    process must reopen the log, which recovers the durable prefix.
    """


class Fenced(StoreFailed):
    """The append's tree is owned by another node now (or was never held here): the
    lease epoch it carried is stale. Nothing of it was stored; this node must drop its
    copy of the tree."""


class SubscriptionClosed(HaloError):
    """A live subscription ended; a new one may resume after ``resume_after``."""

    def __init__(self, reason: str, resume_after: int) -> None:
        super().__init__(f"{reason} (resume after seq {resume_after})")
        self.reason = reason
        self.resume_after = resume_after


class SubscriptionOverflow(SubscriptionClosed):
    """The subscriber fell behind and its bounded buffer filled up.

    No event was skipped: everything up to ``resume_after`` was delivered.
    """


class SessionNotFound(HaloError):
    """No session with this id exists (or the caller may not know it does)."""


class SessionUnavailable(HaloError):
    """The session exists but is archived or deleted: it never runs again."""


class GateRefused(HaloError):
    """A tree-scoped gate refused the call (for example: stop one's own ancestor)."""


class WorkspaceError(HaloError):
    """A workspace file operation broke one of the confinement or content rules."""


class PathNotAccessible(WorkspaceError):
    """The path leaves the workspace or touches runtime state under ``.halo/``."""


class FileProblem(WorkspaceError):
    """The file is missing, binary, too large, or an edit target is not unique."""
