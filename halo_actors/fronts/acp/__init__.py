"""The ACP adapter (``docs/acp.md``): Agent Client Protocol v1 on stdio, bridged to the HTTP front.

Modules, by concern:

- ``jsonrpc``: newline-delimited JSON-RPC 2.0 over a pair of trio streams;
- ``adapter``: the ACP methods, the sessions this process knows, one prompt each;
- ``prompt``: content blocks → one message and its images;
- ``turn``: one prompt's life (chat, follow, re-attach, settle, cancel);
- ``updates`` and ``settle``: frames and history rows → ``session/update`` payloads,
  and what a reconnected reply still lacks (pure);
- ``client``: the HTTP front's routes and an SSE reader (httpx, the ``acp`` extra);
- ``errors``: the one table from server failures to JSON-RPC codes;
- ``stdio`` and ``cli``: the process around it all.

Decisions the specification leaves open: ``docs/design/acp.md``.
"""
