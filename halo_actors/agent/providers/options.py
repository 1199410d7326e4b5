"""What a model spec names and what a profile may set for its responses.

A spec is ``<provider>:<model>`` (``anthropic:claude-sonnet-4-5``,
``openai:gpt-4.1-mini``, ``openai:llama3.2`` for a compatible server), or
``scripted`` for the runtime's ScriptedModel. :class:`ModelOptions` are the
per-response settings a profile may give; :func:`check_options` says, in words, what
a provider cannot take (checked when a profile loads, before anything runs).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ...core.errors import InvalidInput

Provider = Literal["anthropic", "openai"]
PROVIDERS: tuple[Provider, ...] = ("anthropic", "openai")

SPEC_FORMS = "`anthropic:<model>`, `openai:<model>` or `scripted`"

ANTHROPIC_MIN_THINKING = 1024
"""The smallest thinking budget the Anthropic API takes."""


class ModelConfigError(InvalidInput):
    """A model spec, option or endpoint setting is wrong (the message says which)."""


class ModelSpec(msgspec.Struct, frozen=True):
    provider: Provider
    name: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.name}"


def parse_spec(spec: str) -> ModelSpec | None:
    """``None`` for ``scripted``; raises :class:`ModelConfigError` for anything unknown."""
    text = spec.strip()
    if text == "scripted":
        return None
    provider, colon, name = text.partition(":")
    if not colon or provider not in PROVIDERS or not name.strip() or any(c.isspace() for c in name):
        raise ModelConfigError(f"model {spec!r} is not a model spec; use {SPEC_FORMS}")
    return ModelSpec(provider, name)


class ModelOptions(msgspec.Struct, frozen=True, kw_only=True):
    max_tokens: int | None = None
    """Output tokens one response may have (Anthropic requires one; default 8192)."""
    temperature: float | None = None
    thinking_budget: int | None = None
    """Tokens of extended thinking per response (Anthropic ``thinking.budget_tokens``)."""


def check_options(spec: ModelSpec | None, options: ModelOptions, context_window: int) -> list[str]:
    """Problems with ``options`` for ``spec`` (None: the runtime's model, checked generally)."""
    problems: list[str] = []
    if options.max_tokens is not None and options.max_tokens >= context_window:
        problems.append(
            f"`max_tokens` ({options.max_tokens}) must be below the context window "
            f"(`limits.max_tokens` = {context_window})"
        )
    if options.temperature is not None and not 0 <= options.temperature <= 2:
        problems.append(f"`temperature` must be between 0 and 2, got {options.temperature}")
    if spec is None or spec.provider != "anthropic":
        return problems
    if options.temperature is not None:
        problems.append(
            "`temperature` cannot be set for Anthropic models (the Messages API's request "
            "type has no such field)"
        )
    budget = options.thinking_budget
    if budget is not None:
        limit = options.max_tokens or DEFAULT_ANTHROPIC_MAX_TOKENS
        if budget < ANTHROPIC_MIN_THINKING:
            problems.append(
                f"`thinking_budget` must be at least {ANTHROPIC_MIN_THINKING}, got {budget}"
            )
        if budget >= limit:
            problems.append(f"`thinking_budget` ({budget}) must be below `max_tokens` ({limit})")
    return problems


DEFAULT_ANTHROPIC_MAX_TOKENS = 8192
