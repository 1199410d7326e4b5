"""``python -m halo_actors`` → :func:`halo_actors.cli.main`."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
