"""Which Chromium the browser tests drive, with which flags, and why they skip without one.

Debian's ``chromium`` package (``make`` installs it when it runs as root); Playwright
never downloads a browser here, it is handed ``executable_path``.
"""

from __future__ import annotations

import os
import shutil

CHROMIUM = os.environ.get("HALO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MISSING = (
    None
    if os.access(CHROMIUM, os.X_OK)
    else f"browser tests skipped: no Chromium at {CHROMIUM} "
    "(`apt-get install -y chromium` as root; `make test` does it when run as root)"
)
"""Why the browser tests cannot run here, or None (each test module skips with it)."""
