"""Imports flow downward only: core ← tools ← agent ← runtime ← fronts ← demo ← watch ← cli."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "halo_actors"
LAYERS = ["core", "tools", "agent", "runtime", "fronts", "demo", "watch"]
TOP_LEVEL = {"cli", "__main__", "__init__", "logging"}


def _layer_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "halo_actors" or len(parts) < 2:
        return None
    if parts[1] in TOP_LEVEL:
        return len(LAYERS)
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def _imports(path: Path) -> list[str]:
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                found.append(".".join([*base, node.module] if node.module else base))
            elif node.module:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return found


def test_no_module_imports_a_higher_layer() -> None:
    upward = []
    for path in PACKAGE.rglob("*.py"):
        own = _layer_of(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        for target in _imports(path):
            theirs = _layer_of(target)
            if own is not None and theirs is not None and theirs > own:
                upward.append(f"{path.relative_to(PACKAGE)} imports {target}")
    assert upward == []


def test_core_knows_nothing_of_http_models_or_tools() -> None:
    for path in (PACKAGE / "core").rglob("*.py"):
        for target in _imports(path):
            assert not target.startswith(("starlette", "hypercorn", "httpx")), path


def test_every_logger_is_quiet_until_the_program_configures_logging() -> None:
    """Rule: an embedded runtime is quiet by default (structlog configurable): every
    module takes its logger from ``core.logger.get_logger``, never ``structlog`` itself."""
    allowed = {PACKAGE / "core" / "logger.py", PACKAGE / "logging.py"}
    direct = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path not in allowed and "structlog.get_logger" in path.read_text()
    ]
    assert direct == []
