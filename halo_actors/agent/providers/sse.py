"""Server-sent events, parsed incrementally from raw bytes (the ``text/event-stream`` format).

Both model APIs stream SSE. :class:`SseParser` takes the body's bytes in whatever
pieces the network delivers and returns each complete event once its blank line
has arrived.

Invariants:
- a line is decoded only when it is complete, so a UTF-8 character split across
  two network chunks is never cut (the split can only fall inside a line);
- ``\\n`` and ``\\r\\n`` end a line (a lone ``\\r``, legal but used by neither API,
  is not treated as a line end); comment lines (``:`` first) are skipped;
- ``data`` lines of one event join with ``\\n``; an event with no ``data`` line is
  not dispatched (the standard's rule); a field without a value is an empty value.
"""

from __future__ import annotations

from typing import NamedTuple


class SseEvent(NamedTuple):
    event: str
    """The ``event:`` field, ``""`` when absent (the standard's default ``message``)."""
    data: str


class SseParser:
    __slots__ = ("_data", "_event", "_partial")

    def __init__(self) -> None:
        self._partial = b""
        """Bytes of a line whose end has not arrived yet."""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Every event completed by ``chunk``, in order."""
        cut = chunk.rfind(b"\n")
        if cut < 0:
            self._partial += chunk
            return []
        complete = self._partial + chunk[: cut + 1] if self._partial else chunk[: cut + 1]
        self._partial = chunk[cut + 1 :]
        # Complete lines only: a UTF-8 character never straddles the cut at a newline.
        lines = complete.decode("utf-8", errors="replace").split("\n")
        lines.pop()  # the empty string after the last newline
        out: list[SseEvent] = []
        for line in lines:
            if line.endswith("\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    out.append(SseEvent(self._event, "\n".join(self._data)))
                self._event, self._data = "", []
            elif line.startswith("data:"):
                self._data.append(line[6:] if line.startswith("data: ") else line[5:])
            elif line == "data":
                self._data.append("")
            elif line.startswith("event:"):
                self._event = line[7:] if line.startswith("event: ") else line[6:]
            # comments (":" first), ``id``, ``retry`` and unknown fields are ignored
        return out

    @property
    def pending(self) -> bool:
        """True when bytes or fields of an unfinished event are buffered."""
        return bool(self._partial or self._data)
