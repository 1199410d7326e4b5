"""Fixtures of the browser tests: Debian's Chromium driven by Playwright, a real server.

See ``chromium.py`` for the browser and why the tests skip without it. Screenshots
go to ``$HALO_ARTIFACTS`` (default ``.artifacts/web``, git-ignored).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium import ARGS, CHROMIUM, MISSING
from page_driver import Person, open_person
from playwright.sync_api import Browser, sync_playwright
from served import WebServer

ARTIFACTS = Path(os.environ.get("HALO_ARTIFACTS", Path(__file__).parents[2] / ".artifacts" / "web"))


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def person(browser: Browser, server: WebServer) -> Iterator[Person]:
    """A person at 1280×800 in a fresh browser context, closed after the test."""
    with open_person(browser, server) as someone:
        yield someone


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if MISSING is not None:
        terminalreporter.write_line(MISSING, yellow=True)
