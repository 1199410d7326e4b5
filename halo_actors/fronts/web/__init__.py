"""The web page served at ``/`` by the HTTP front (``fronts/http/page.py``).

Plain files, shipped as package data: ``index.html``, ``style.css`` and ES modules
(``app.js`` wiring, ``api.js`` requests and the tree stream, ``fold.js`` records →
tree state, ``view.js`` drawing). No build step and nothing loaded from elsewhere.
Invariants: every string from the server reaches the DOM through ``textContent``
(never parsed as HTML); the token lives in ``sessionStorage`` and goes in a header,
except in the tree stream's ``EventSource`` URL, which cannot carry one.
See ``docs/ui.md``.
"""
