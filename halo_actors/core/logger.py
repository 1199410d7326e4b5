"""The runtime's structlog loggers: quiet in an embedding program until it says otherwise.

Every module gets its logger from :func:`get_logger`. While structlog is not
configured (``structlog.is_configured()`` is false), a call goes to a private
logger that writes warnings and errors to stderr and drops the rest, so an
embedded runtime prints nothing in normal operation. Once the program (or the
CLI, through ``halo_actors.logging.configure_logging``) calls
``structlog.configure``, every call follows that configuration: level, format,
destination. The choice is made per call, so configuring late works too.
"""

from __future__ import annotations

import logging
import sys
from typing import cast

import structlog
from structlog.typing import FilteringBoundLogger

_quiet: FilteringBoundLogger | None = None


def _quiet_logger() -> FilteringBoundLogger:
    global _quiet
    if _quiet is None:
        _quiet = cast(
            FilteringBoundLogger,
            structlog.wrap_logger(
                structlog.PrintLogger(sys.stderr),
                processors=[
                    structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"),
                    structlog.dev.ConsoleRenderer(
                        colors=False, exception_formatter=structlog.dev.plain_traceback
                    ),
                ],
                wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            ),
        )
    return _quiet


class _Logger:
    """A logger name plus bound values; resolved to a real logger at each call."""

    __slots__ = ("_context", "_name")

    def __init__(self, name: str, context: dict[str, object]) -> None:
        self._name = name
        self._context = context

    def bind(self, **values: object) -> FilteringBoundLogger:
        return cast(FilteringBoundLogger, _Logger(self._name, {**self._context, **values}))

    def _target(self) -> FilteringBoundLogger:
        if structlog.is_configured():
            target = cast(FilteringBoundLogger, structlog.get_logger(self._name))
        else:
            target = _quiet_logger()
        return target.bind(logger=self._name, **self._context)

    def __getattr__(self, method: str) -> object:
        return getattr(self._target(), method)


def get_logger(name: str) -> FilteringBoundLogger:
    """The logger for ``name`` (e.g. ``halo_actors.http``); see the module docstring."""
    return cast(FilteringBoundLogger, _Logger(name, {}))
