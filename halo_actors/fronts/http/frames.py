"""Log records → client frames: the one projection SSE and the WebSocket push share.

A frame is ``(seq, payload, part)``: the payload is exactly the JSON object of
``docs/http.md``; ``seq`` is the log sequence number of the record that produced
it (or, for frames a route builds, the cursor the stream stands at). A record
shown as several frames (text, then a ``file`` for a ``MEDIA:`` line; flushed text,
then ``complete``) numbers all but its last: ``part`` k means "the first k frames
of record ``seq``", and the frame's id reads ``seq.k``. The last frame, like every
single one, has the plain id ``seq``: "everything through record ``seq``". So every
frame id names exactly what came before it, and a resume (:class:`Resume`) from
any id has no gap and no duplicate.

Rules:
- only client kinds leave the server: ``user``, ``thinking``, ``stream``,
  ``tool_call``, ``tool_result`` (result capped at 500 characters), ``error``,
  ``complete``; internal facts and system rows are dropped;
- ``MEDIA: <path>`` lines of streamed text become ``file`` frames, one line at a
  time, even when the line arrives split across deltas (:class:`MediaFilter`);
  the filter flushes at every ``complete``;
- SSE (``push=False``): a batch-boundary ``complete`` is absorbed; the first
  unmarked ``complete`` (or, failing one, the run's ``agent_done``) is terminal and
  sets :attr:`Projector.done`; an ``agent_done`` right after a terminal ``complete``
  (the same run's end) shows nothing, also when a resume starts between the two. Push (``push=True``): every ``complete`` goes out
  with its ``batchBoundary`` field and nothing is terminal.
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import quote

import msgspec

from ...core.events import (
    AgentDone,
    ErrorRaised,
    Record,
    RoundStarted,
    TextStreamed,
    ThinkingStreamed,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
)

Payload = dict[str, object]


class Frame(NamedTuple):
    seq: int
    payload: Payload
    part: int = 0
    """0: this frame ends record ``seq`` (or is the only one); k: the k-th of its frames."""

    @property
    def event_id(self) -> str:
        return f"{self.seq}.{self.part}" if self.part else str(self.seq)


class Resume(NamedTuple):
    """A resume id (``Last-Event-ID``): ``seq``, or ``seq.part`` inside one record."""

    seq: int
    part: int = 0

    @property
    def after_seq(self) -> int:
        """The log cursor to replay after: a part-way record is replayed whole."""
        return self.seq - 1 if self.part else self.seq


RESULT_CAP = 500
FILE_ROUTE = "/api/web/file"
_MEDIA_LINE = re.compile(r"[ \t]*MEDIA:[ \t]*(\S(?:.*\S)?)[ \t]*\r?\n?")
_MEDIA = "MEDIA:"
_encoder = msgspec.json.Encoder()


def session_frame(seq: int, session_id: str) -> Frame:
    return Frame(seq, {"type": "session", "sessionId": session_id})


def switch_frame(seq: int, session_id: str) -> Frame:
    return Frame(seq, {"type": "switch", "sessionId": session_id})


def queued_frame(seq: int) -> Frame:
    return Frame(seq, {"type": "queued"})


def complete_frame(seq: int, reason: str | None = None) -> Frame:
    """``complete``; ``reason`` says why the turn ended (``end_turn``, ``interrupted``,
    ``stopped``, ``error``, …) when a turn ended (a command's stream has none)."""
    return Frame(
        seq, {"type": "complete"} if reason is None else {"type": "complete", "reason": reason}
    )


def text_frame(seq: int, text: str) -> Frame:
    return Frame(seq, {"type": "stream", "text": text})


def file_frame(seq: int, path: str) -> Frame:
    return Frame(seq, {"type": "file", "path": path, "url": f"{FILE_ROUTE}?path={quote(path)}"})


def encode_sse(frame: Frame) -> bytes:
    return b"id: %s\ndata: %s\n\n" % (frame.event_id.encode(), _encoder.encode(frame.payload))


def encode_push(frame: Frame) -> str:
    """The payload with its ``seq``, and ``part`` on all but the last frame of a record."""
    extra: Payload = {"seq": frame.seq, "part": frame.part} if frame.part else {"seq": frame.seq}
    return _encoder.encode(frame.payload | extra).decode()


class MediaFilter:
    """Strips ``MEDIA: <path>`` lines from streamed text, one line at a time.

    Text is held back only while the current (unfinished) line could still turn
    out to be a ``MEDIA:`` line; everything else passes through at once. Once part
    of a line has gone out as text, the rest of that line is text too: ``see MEDIA:
    x`` split as ``see `` + ``MEDIA: x`` is not a ``MEDIA:`` line.
    """

    def __init__(self) -> None:
        self.pending = ""
        self.mid_line = False
        """Part of the current line already went out as text."""

    def feed(self, text: str) -> list[tuple[str, str]]:
        """``[("text", s) | ("file", path), …]`` for this delta."""
        self.pending += text
        out: list[tuple[str, str]] = []
        while (cut := self.pending.find("\n")) >= 0:
            line, self.pending = self.pending[: cut + 1], self.pending[cut + 1 :]
            self._line(line, out)
        if self.pending and (self.mid_line or not _could_be_media(self.pending)):
            _add_text(out, self.pending)
            self.pending = ""
            self.mid_line = True
        return out

    def flush(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.pending:
            self._line(self.pending, out)
            self.pending = ""
        self.mid_line = False
        return out

    def _line(self, line: str, out: list[tuple[str, str]]) -> None:
        found = None if self.mid_line else _MEDIA_LINE.fullmatch(line)
        if found is not None:
            out.append(("file", found.group(1)))
        else:
            _add_text(out, line)
        self.mid_line = False


def _could_be_media(partial: str) -> bool:
    head = partial.lstrip(" \t")
    return _MEDIA.startswith(head) or head.startswith(_MEDIA)


def _add_text(out: list[tuple[str, str]], text: str) -> None:
    if out and out[-1][0] == "text":
        out[-1] = ("text", out[-1][1] + text)
    else:
        out.append(("text", text))


def strip_media(text: str) -> str:
    """The text a stream shows for a whole logged reply (history readers use the same rule)."""
    media = MediaFilter()
    parts = [*media.feed(text), *media.flush()]
    return "".join(s for kind, s in parts if kind == "text")


class Projector:
    """Stateful projection of one session's records (in seq order) into frames."""

    def __init__(
        self, *, push: bool = False, media: MediaFilter | None = None, skip: Resume | None = None
    ) -> None:
        self.push = push
        self.media = media or MediaFilter()
        self.skip = skip if skip is not None and skip.part else None
        """A resume inside a record: its first ``part`` frames were already shown."""
        self.done = False
        self.after_terminal = False
        """The last run-closing record seen was a terminal ``complete``: the run's
        ``agent_done`` that follows it ends nothing new."""

    def project(self, record: Record) -> list[Frame]:
        """The record's frames, all but the last numbered (``part``), less any skipped."""
        if self.done:
            return []
        frames = self._frames(record)
        if len(frames) > 1:
            frames[:-1] = [f._replace(part=k) for k, f in enumerate(frames[:-1], 1)]
        if self.skip is not None and self.skip.seq == record.seq:
            frames, self.skip = frames[self.skip.part :], None
        return frames

    def _frames(self, record: Record) -> list[Frame]:
        seq = record.seq
        match record.event:
            case TextStreamed(text=text):
                return self._pieces(seq, self.media.feed(text))
            case RoundStarted(text=text):
                self.after_terminal = False
                return [Frame(seq, {"type": "user", "text": text})]
            case ThinkingStreamed(text=text):
                return [Frame(seq, {"type": "thinking", "text": text})]
            case ToolCalled() as e:
                payload: Payload = {"type": "tool_call", "toolName": e.tool_name}
                payload |= {"toolUseId": e.tool_use_id, "toolInput": e.tool_input}
                return [Frame(seq, payload)]
            case ToolReturned() as e:
                shown = e.ui_result if e.ui_result is not None else e.result
                payload = {"type": "tool_result", "toolName": e.tool_name}
                payload |= {"toolUseId": e.tool_use_id, "result": shown[:RESULT_CAP]}
                return [Frame(seq, payload)]
            case ErrorRaised(error=error):
                return [Frame(seq, {"type": "error", "error": error})]
            case TurnCompleted(batch_boundary=boundary, stop_reason=reason):
                self.after_terminal = not boundary
                return self._complete(seq, boundary, reason)
            case AgentDone() if not self.push and self.after_terminal:
                self.after_terminal = False  # the end of a run whose complete went out
                return []
            case AgentDone() if not self.push:
                return self._complete(seq, False)
            case _:
                return []

    def _complete(self, seq: int, boundary: bool, reason: str | None = None) -> list[Frame]:
        frames = self._pieces(seq, self.media.flush())
        if self.push:
            payload: Payload = {"type": "complete", "batchBoundary": boundary}
            frames.append(Frame(seq, payload if reason is None else payload | {"reason": reason}))
        elif not boundary:
            frames.append(complete_frame(seq, reason))
            self.done = True
        return frames

    @staticmethod
    def _pieces(seq: int, pieces: list[tuple[str, str]]) -> list[Frame]:
        return [
            text_frame(seq, value) if kind == "text" else file_frame(seq, value)
            for kind, value in pieces
        ]
