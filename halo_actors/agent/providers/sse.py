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
        if self._partial:
            chunk = self._partial + chunk
        lines = chunk.split(b"\n")
        self._partial = lines.pop()
        out: list[SseEvent] = []
        for raw in lines:
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if not line:
                if self._data:
                    out.append(SseEvent(self._event, "\n".join(self._data)))
                self._event, self._data = "", []
                continue
            self._field(line.decode("utf-8", errors="replace"))
        return out

    def _field(self, line: str) -> None:
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value

    @property
    def pending(self) -> bool:
        """True when bytes or fields of an unfinished event are buffered."""
        return bool(self._partial or self._data)
