"""The web page at ``/``: shipped files, a strict CSP, nothing inline, nothing remote.

What the page does in a browser is tested in ``tests/web`` (real Chromium), which
also checks which URLs carry the token.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from importlib import resources

import trio
from web_client import Harness

from halo_actors.fronts.http.page import CSP, PACKAGE


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.script_text.append(data)


def _shipped() -> dict[str, str]:
    root = resources.files(PACKAGE)
    return {
        f.name: f.read_text() for f in root.iterdir() if f.name.endswith((".html", ".js", ".css"))
    }


async def test_the_page_and_its_files_are_served_with_a_strict_csp(harness: Harness) -> None:
    """Rule: the page is served from files shipped in the package, with a strict
    Content-Security-Policy (no inline script), and needs no token to load."""
    with trio.fail_after(10):
        async with harness.client() as client:
            page = await client.get("/")
            files = {name: await client.get(f"/web/{name}") for name in _shipped()}
            missing = await client.get("/web/../pyproject.toml")
            unknown = await client.get("/web/nothing.js")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert csp == CSP
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    for name, resp in files.items():
        assert resp.status_code == 200, name
        assert resp.text == _shipped()[name]
        assert resp.headers["content-security-policy"] == CSP
    assert files["app.js"].headers["content-type"].startswith("text/javascript")
    assert unknown.status_code == 404 and unknown.json() == {"error": "no such file"}
    assert missing.status_code == 404


def test_the_page_has_no_inline_script_or_style_and_loads_nothing_remote() -> None:
    """Rule: no build step, no CDN, works offline; no inline script (the CSP would block it)."""
    shipped = _shipped()
    parser = _Tags()
    parser.feed(shipped["index.html"])
    assert parser.script_text == []
    for tag, attrs in parser.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert "style" not in attrs, (tag, attrs)
        for name in ("src", "href"):
            value = attrs.get(name)
            assert value is None or value.startswith("/web/"), (tag, attrs)
    for name, text in shipped.items():
        assert not re.search(r"https?://", text), f"{name} names a remote URL"
    scripts = "".join(text for name, text in shipped.items() if name.endswith(".js"))
    assert "innerHTML" not in scripts and "insertAdjacentHTML" not in scripts
    assert "eval(" not in scripts and "new Function" not in scripts
    assert "sessionStorage" in scripts and "localStorage" not in scripts
