"""Real model providers behind the ``Model`` protocol: one module per wire format.

``build_model("anthropic:claude-sonnet-4-5")`` or ``build_model("openai:gpt-4.1")``
makes a provider from a spec, reading its endpoint and key from the environment
the way the official SDKs do (``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``,
``OPENAI_BASE_URL``/``OPENAI_API_KEY``). Providers translate; they do not decide
(``docs/design/models.md``).
"""

from __future__ import annotations

from collections.abc import Mapping

from .anthropic import AnthropicModel
from .openai import OpenAIModel
from .options import ModelConfigError, ModelOptions, ModelSpec, parse_spec
from .retry import RetryPolicy

Provider = AnthropicModel | OpenAIModel

__all__ = [
    "AnthropicModel",
    "ModelConfigError",
    "ModelOptions",
    "ModelSpec",
    "OpenAIModel",
    "Provider",
    "RetryPolicy",
    "build_model",
    "parse_spec",
]


def build_model(
    spec: str | ModelSpec,
    *,
    options: ModelOptions | None = None,
    env: Mapping[str, str] | None = None,
    retry: RetryPolicy | None = None,
) -> Provider:
    """The provider a spec names; :class:`ModelConfigError` for a bad spec or a missing key."""
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    if parsed is None:
        raise ModelConfigError("`scripted` names the ScriptedModel, not a provider")
    kind = AnthropicModel if parsed.provider == "anthropic" else OpenAIModel
    return kind(parsed.name, options=options, env=env, retry=retry)
