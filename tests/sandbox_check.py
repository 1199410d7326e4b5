"""Whether the workspace sandbox can run on this machine, asked once per test run.

``make test`` / ``.ci/run`` install bubblewrap when missing and root; elsewhere the
tests that need a working sandbox skip, and the run's header says why in one line
(``tests/conftest.py``).
"""

from __future__ import annotations

import functools
import tempfile

import pytest
import trio

from halo_actors.tools.sandbox import Sandbox, SandboxUnavailable


@functools.cache
def sandbox_problem() -> str | None:
    """None when a sandbox starts here, else why not (with the fix)."""

    async def probe() -> str | None:
        with tempfile.TemporaryDirectory() as workspace:
            try:
                await Sandbox().ensure_ready(workspace)
            except SandboxUnavailable as exc:
                return str(exc)
        return None

    return trio.run(probe)


def needs_sandbox() -> pytest.MarkDecorator:
    """Skip the test (or module, as ``pytestmark``) when the sandbox cannot start here."""
    problem = sandbox_problem()
    return pytest.mark.skipif(problem is not None, reason=f"sandbox tests skipped: {problem}")
