"""The HTTP front (``docs/http.md``): web channel routes, SSE, WebSocket push, tokens.

Modules, by concern:

- ``tokens``: accounts, access levels and hashed token secrets on disk;
- ``auth`` and ``addressing``: who is calling and which workspace and session
  a request means (overrides, ownership, the active-session pointer);
- ``runtimes``: one runtime per workspace, opened on demand in the server's nursery;
- ``frames``, ``sse``, ``streams``: log records → client frames → an SSE response;
- ``history``: the ``/api/web/history`` projection of a session's log;
- ``routes``, ``commands``, ``ws``, ``openapi``, ``app``: the Starlette app;
- ``server``: hypercorn's trio worker in a nursery; ``cli``: ``serve`` and ``token``.

This package imports Starlette and Hypercorn only from the modules that need them,
so ``python -m halo_actors token …`` works without the ``http`` extra.
"""
