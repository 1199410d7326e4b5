"""The web page at ``/``: static files shipped in the package (``halo_actors/fronts/web``).

No build step, no CDN, nothing fetched from elsewhere: the files are read from the
installed package once, when the app is built, and served from memory. The page
holds no secret (the token is pasted into it), so these routes take no token.

Every answer carries a strict Content-Security-Policy: scripts, styles and
connections from this origin only, no inline script or style, no plugins, no
framing, no form posts, no ``<base>``. With the page rendering model and tool
output as text only (``textContent``), a payload such as ``<img src=x onerror=…>``
stays text; were it ever parsed as HTML, the policy still refuses to run it.
Only the listed files are served (no path is ever joined from the request).
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .errors import ApiError

PACKAGE: Final = "halo_actors.fronts.web"
CSP: Final = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "img-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
HEADERS: Final = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-cache",
}


def load_files() -> dict[str, tuple[bytes, str]]:
    """Every servable file of the page: name → (bytes, content type)."""
    files: dict[str, tuple[bytes, str]] = {}
    for entry in resources.files(PACKAGE).iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in TYPES:
            files[entry.name] = (entry.read_bytes(), TYPES[suffix])
    return files


def page_routes() -> list[Route]:
    files = load_files()

    def answer(name: str) -> Response:
        found = files.get(name)
        if found is None:
            raise ApiError(404, "no such file")
        body, media_type = found
        return Response(body, media_type=media_type, headers=HEADERS)

    async def index(request: Request) -> Response:
        return answer("index.html")

    async def static(request: Request) -> Response:
        return answer(str(request.path_params["name"]))

    return [
        Route("/", index, methods=["GET"]),
        Route("/web/{name}", static, methods=["GET"]),
    ]
