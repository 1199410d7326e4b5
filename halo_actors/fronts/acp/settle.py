"""Settling a prompt's reply against the server's history after a queue or a dropped stream.

Pure: given the history rows of this turn's tail, the prompt's text and what
was streamed, say what (if anything) the client still needs to see:

- the logged reply is already shown (equal, or the stream went on past it into
  a round that followed) → nothing;
- the streamed text is a prefix of the logged reply → the missing tail;
- anything else (a gap mid-reply) → the whole reply again behind
  :data:`RECONNECTED`, so a reply with a hole in it is never left alone.

``MEDIA:`` lines are stripped from the logged reply one line at a time with the
server's own rule (:func:`~halo_actors.fronts.http.frames.strip_media`).
"""

from __future__ import annotations

from ..http.frames import strip_media

RECONNECTED = "[reconnected — full reply]\n"
SKEW_MARGIN_MS = 5 * 60 * 1000
"""The settle reads history from the turn's start minus this (clocks may disagree)."""


def logged_reply(rows: list[object], prompt: str) -> str | None:
    """The assistant text after the last user row that carries ``prompt``, or None."""
    start = None
    for index, row in enumerate(rows):
        if isinstance(row, dict) and row.get("role") == "user" and prompt in str(row.get("text")):
            start = index
    if start is None:
        return None
    parts: list[str] = []
    for row in rows[start + 1 :]:
        if not isinstance(row, dict) or row.get("role") == "user":
            break
        if row.get("role") == "assistant" and isinstance(row.get("text"), str):
            parts.append(str(row["text"]))
    return strip_media("".join(parts))


def missing_text(logged: str | None, streamed: str) -> str:
    if logged is None or streamed.startswith(logged):
        return ""
    if logged.startswith(streamed):
        return logged[len(streamed) :]
    return RECONNECTED + logged
