"""Terminal clients for people: ``watch`` (a remote tree, live) and ``history`` (a log, offline).

- :mod:`.remote` follows a server's tree stream over the WebSocket (trio-websocket),
  reconnecting after a drop and resuming after the last record it saw;
- :mod:`.screen` draws what it sees: the demo's live tree view (rich) on a terminal,
  one line per event elsewhere;
- :mod:`.history` reads a workspace's event log read-only, with no server;
- :mod:`.cli` parses the two commands and wires them.

This package sits above ``demo`` (it reuses the demo's board and drawing) and below
the top-level ``cli``. See ``docs/ui.md``.
"""
