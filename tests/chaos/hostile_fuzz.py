"""Schemathesis against the served OpenAPI document, driven from a worker thread.

Schemathesis is synchronous (requests), so the test runs the server in its own trio
loop and calls :func:`fuzz` through ``trio.to_thread``. Each (operation, token,
generation mode) is one Hypothesis run seeded from the chaos seed, so a seed
reproduces the same requests.

Checks on every response: no 5xx, the status is documented, the content type is
documented, the body (each SSE event and its JSON ``data`` included) matches its
schema, headers conform, schema-violating input is refused (negative mode), and
no body carries a traceback. Not checked: that every schema-valid request is
accepted (``positive_data_acceptance``): some refusals depend on state the schema
cannot know (a workspace that is not a directory, a whitespace-only message, the
ids ``.`` and ``..``).

Who fuzzes what: the ``workspace`` token everything, in both modes; the
``readonly`` token everything, positive; the ``full`` token only the read routes
(a full token may name any directory as its workspace, and a writing route would
create ``.halo/`` there).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, TypeVar

import hypothesis
import hypothesis.errors
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis import checks as st_checks
from schemathesis.config import SchemathesisConfig
from schemathesis.core.result import Err, Ok
from schemathesis.errors import FailureGroup, InvalidSchema

RESPONSE_CHECKS = [
    st_checks.not_a_server_error,
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_schema_conformance,
    st_checks.response_headers_conformance,
]
TRACEBACK_MARKERS = (b"Traceback (most recent call last)", b'File "/')


@dataclass
class FuzzResult:
    requests: int = 0
    checks: int = 0
    failures: list[str] = field(default_factory=list)
    by_status: dict[int, int] = field(default_factory=dict)


def plan(doc: dict[str, Any]) -> list[tuple[str, str, GenerationMode]]:
    """``(token name, "METHOD /path", mode)`` for every run (see the module docstring)."""
    runs = []
    for path, ops in sorted(doc["paths"].items()):
        for method in sorted(ops):
            label = f"{method.upper()} {path}"
            runs.append(("workspace", label, GenerationMode.POSITIVE))
            if ops[method].get("parameters") or ops[method].get("requestBody"):
                runs.append(("workspace", label, GenerationMode.NEGATIVE))
            runs.append(("readonly", label, GenerationMode.POSITIVE))
            if method == "get":
                runs.append(("full", label, GenerationMode.POSITIVE))
    return runs


def fuzz(
    url: str, doc: dict[str, Any], tokens: dict[str, str], seed: int, examples: int
) -> FuzzResult:
    """Run every planned operation; blocking (call it from a worker thread)."""
    config = SchemathesisConfig.from_dict({"generation": {"allow-extra-parameters": False}})
    schema = schemathesis.openapi.from_dict(doc, config=config)
    operations = {
        f"{op.method.upper()} {op.path}": op
        for op in (_loaded(result) for result in schema.get_all_operations())
    }
    result = FuzzResult()
    with requests.Session() as session:
        for token_name, label, mode in plan(doc):
            one = _Run(url, session, tokens[token_name], label, token_name, mode, result)
            one.run(operations[label], seed, examples)
    return result


T = TypeVar("T")


def _loaded(result: Ok[T] | Err[InvalidSchema]) -> T:
    """The loaded operation; one the served document defines invalidly raises its error."""
    if isinstance(result, Err):
        raise result.err()
    return result.ok()


@dataclass
class _Run:
    url: str
    session: requests.Session
    token: str
    label: str
    token_name: str
    mode: GenerationMode
    result: FuzzResult

    def run(self, operation: Any, seed: int, examples: int) -> None:
        @hypothesis.seed(seed)
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=self.mode))
        def one_case(case: Any) -> None:
            self.check(case)

        with contextlib.suppress(hypothesis.errors.Unsatisfiable):
            one_case()  # Unsatisfiable: nothing to vary (``GET /api/openapi.json``, negative)

    def check(self, case: Any) -> None:
        headers = {"x-token": self.token}
        checks = list(RESPONSE_CHECKS)
        if self.mode is GenerationMode.NEGATIVE and "/api/web/ws" not in self.label:
            checks.append(st_checks.negative_data_rejection)  # ws: a plain GET is 426 first
        where = f"{self.label} ({self.token_name} token, {self.mode.value})"
        try:
            response = case.call(
                base_url=self.url, session=self.session, headers=headers, timeout=15
            )
        except requests.RequestException as exc:
            self.result.failures.append(f"{where}: no answer: {exc!r}")
            return
        self.result.requests += 1
        self.result.by_status[response.status_code] = (
            self.result.by_status.get(response.status_code, 0) + 1
        )
        self.result.checks += len(checks) + 1
        if any(marker in response.content for marker in TRACEBACK_MARKERS):
            self.result.failures.append(f"{where}: a traceback in the body: {response.text[:300]}")
        try:
            case.validate_response(response, checks=checks, headers=headers)
        except FailureGroup as group:
            first = str(group).strip().splitlines()
            self.result.failures.append(f"{where}: {' | '.join(first[:8])}")
