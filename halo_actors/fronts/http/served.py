"""A workspace file answered inline, whose ``Range`` errors are JSON like every other error.

Starlette's ``FileResponse`` serves ranges itself but answers a malformed ``Range``
(``400``) in plain text and an unsatisfiable one (``416``) with an empty body. This
response checks the header first, with the same parser and under the same conditions
(a ``GET``/``HEAD`` whose ``If-Range``, if any, still matches), and answers those two
cases ``{"error": ...}``; a 416 keeps its ``Content-Range: bytes */<size>``.
"""

from __future__ import annotations

import os

from starlette.datastructures import Headers
from starlette.responses import FileResponse, MalformedRangeHeader, RangeNotSatisfiable
from starlette.types import Receive, Scope, Send

from .errors import error_body

FILE_HEADERS = {"x-content-type-options": "nosniff", "content-security-policy": "sandbox"}


class ServedFile(FileResponse):
    def __init__(self, path: str, stat_result: os.stat_result, *, name: str | None = None) -> None:
        name = name or path.rsplit("/", 1)[-1]
        self._fd: int | None = None
        super().__init__(
            path,
            headers=FILE_HEADERS,
            filename=name,
            content_disposition_type="inline",
            stat_result=stat_result,
        )
        self.size = stat_result.st_size

    @classmethod
    def opened(cls, fd: int, name: str) -> ServedFile:
        """Serve the file behind ``fd`` (already opened and checked; closed once sent).

        Read through ``/proc/self/fd``: the same file, whatever is renamed or swapped
        at its path meanwhile."""
        try:
            served = cls(f"/proc/self/fd/{fd}", os.fstat(fd), name=name)
        except BaseException:
            os.close(fd)
            raise
        served._fd = fd
        return served

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._answer(scope, receive, send)
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        wanted = headers.get("range")
        if_range = headers.get("if-range")
        if (
            wanted is not None
            and scope["method"].upper() in ("GET", "HEAD")
            and (if_range is None or self._should_use_range(if_range))
        ):
            try:
                self._parse_range_header(wanted, self.size)
            except MalformedRangeHeader as exc:
                answer = error_body(400, f"malformed Range header: {exc.content}")
                return await answer(scope, receive, send)
            except RangeNotSatisfiable:
                answer = error_body(416, f"range not satisfiable: the file has {self.size} bytes")
                answer.headers["content-range"] = f"bytes */{self.size}"
                return await answer(scope, receive, send)
        await super().__call__(scope, receive, send)
