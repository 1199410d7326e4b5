"""Driving the page as a person does: sign in, pick a session, type, press buttons.

Every wait is Playwright's own (``expect`` polls the DOM until its timeout), never a
sleep. The page is opened with two observers that CSP does not govern (Playwright
injects them): every CSP violation, and every request URL, so a test can check
that nothing tried to run and that only the tree stream's URL carries the token.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Browser, Locator, Page, expect
from served import WebServer

WAIT_MS = 20_000
"""How long ``expect`` waits for the page to show something (a loaded 2-core machine)."""

OBSERVE = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push(e.violatedDirective + " " + e.blockedURI);
});
"""


@dataclass
class Person:
    page: Page
    server: WebServer
    urls: list[str] = field(default_factory=list)

    def sign_in(self, token: str) -> None:
        self.page.goto(self.server.url + "/")
        self.page.fill("#token", token)
        self.page.click("#login-form button[type=submit]")
        expect(self.page.locator("#main")).to_be_visible(timeout=WAIT_MS)

    def new_session(self) -> str:
        before = self.page.locator("#session-list .session").count()
        self.page.click("#new-session")
        expect(self.page.locator("#session-list .session")).to_have_count(
            before + 1, timeout=WAIT_MS
        )
        expect(self.page.locator("#tree .node")).to_have_count(1, timeout=WAIT_MS)
        root = self.page.locator("#tree .node").first.get_attribute("data-session-id")
        assert root is not None
        return root

    def say(self, text: str) -> None:
        expect(self.page.locator("#message")).to_be_enabled(timeout=WAIT_MS)
        self.page.fill("#message", text)
        self.page.click("#send")

    def node(self, session_id: str) -> Locator:
        return self.page.locator(f'#tree .node[data-session-id="{session_id}"]')

    def nodes(self) -> Locator:
        return self.page.locator("#tree .node")

    def entries(self, kind: str) -> Locator:
        return self.page.locator(f"#transcript .entry.{kind}")

    def confirm(self) -> None:
        expect(self.page.locator("#confirm")).to_be_visible(timeout=WAIT_MS)
        self.page.click("#confirm-ok")

    def wait_state(self, session_id: str, state: str) -> None:
        expect(self.node(session_id)).to_have_attribute("data-state", state, timeout=WAIT_MS)

    def violations(self) -> list[str]:
        found: list[str] = self.page.evaluate("window.__violations")
        return found

    def body(self, name: str) -> str:
        return str(self.page.evaluate(f"document.body.dataset.{name} || ''"))

    def shot(self, path: Path) -> None:
        self.page.screenshot(path=str(path), full_page=False)


@contextmanager
def open_person(
    browser: Browser, server: WebServer, width: int = 1280, height: int = 800
) -> Iterator[Person]:
    """A fresh browser context (its own sessionStorage) with one page; closed on exit."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        yield _observed(context.new_page(), server)
    finally:
        context.close()


def _observed(page: Page, server: WebServer) -> Person:
    page.set_default_timeout(WAIT_MS)
    page.add_init_script(OBSERVE)
    person = Person(page, server)
    page.on("request", lambda request: person.urls.append(request.url))
    return person
