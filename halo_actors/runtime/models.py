"""Which model each agent profile runs on, behind one ``Model``.

A runtime has one model of its own (the scripted demo agent, or the provider that
``--model``/``open_runtime(model=...)`` named); a profile may name another
(``model = "openai:gpt-4.1"``) and set per-response options. :class:`ProfileModels`
resolves every profile once, when the runtime opens — a bad spec or a missing key
stops the runtime from opening when it is the runtime's own model; a profile whose
own model cannot be made (a missing key) is marked broken, like a broken profile
file, so only its sessions fail, with the variable named — and then sends each
request to its agent's model by ``request.agent_id``.

Resolution of a profile's ``model``:
- ``""`` (the default): the runtime's model, with the profile's options when it is
  a provider (options mean nothing to another model);
- ``"scripted"``: the runtime's model if it is a ScriptedModel, else the demo agent;
- ``"<provider>:<name>"``: a provider of its own (one per distinct spec and options).

Invariant: providers made here are closed by :meth:`ProfileModels.aclose`; a model
object handed in by the caller is the caller's to close.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from ..agent.demo_agent import DEMO_SCRIPT
from ..agent.model import Model, ModelEvent, ModelRequest
from ..agent.providers import AnthropicModel, OpenAIModel, Provider, build_model
from ..agent.providers.options import ModelConfigError, ModelOptions, check_options
from ..agent.scripted import ScriptedModel
from ..core.errors import ProfileError
from .profiles import AgentProfile, Profiles


def default_model() -> ScriptedModel:
    """The scripted demo agent, for every profile without a script of its own."""
    return ScriptedModel({}, fallback=DEMO_SCRIPT)


def resolve_model(model: Model | str | None, env: Mapping[str, str] | None = None) -> Model:
    """A model object as given; a spec string as its provider; None as the demo agent."""
    if model is None or model == "scripted":
        return default_model()
    if isinstance(model, str):
        return build_model(model, env=env)
    return model


class ProfileModels:
    """Implements ``Model``: each request goes to its agent profile's model."""

    def __init__(
        self, default: Model, profiles: Profiles, env: Mapping[str, str] | None = None
    ) -> None:
        self.default = default
        self._env = env
        self._by_agent: dict[str, Model] = {}
        self._made: dict[tuple[str, ModelOptions], Provider] = {}
        self._demo: ScriptedModel | None = None
        for name in profiles.names():
            profile = profiles.get(name)
            if profile is None:
                continue
            try:
                self._by_agent[name] = self._resolve(profile)
            except ModelConfigError as exc:
                profiles.mark_broken(name, ProfileError(f"agent profile {name!r}: {exc}"))

    def model_for(self, agent_id: str) -> Model:
        return self._by_agent.get(agent_id, self.default)

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        return self.model_for(request.agent_id).stream(request)

    async def aclose(self) -> None:
        made, self._made = list(self._made.values()), {}
        for provider in made:
            await provider.aclose()

    def _resolve(self, profile: AgentProfile) -> Model:
        options = profile.model_options()
        if profile.model == "scripted":
            if isinstance(self.default, ScriptedModel):
                return self.default
            self._demo = self._demo or default_model()
            return self._demo
        if profile.model:
            return self._made_once(profile.model, options, None)
        if options == ModelOptions() or not isinstance(self.default, AnthropicModel | OpenAIModel):
            return self.default
        problems = check_options(self.default.spec, options, profile.limits.max_tokens)
        if problems:
            raise ModelConfigError(f"profile {profile.name!r}: {'; '.join(problems)}")
        return self._made_once(repr(self.default), options, self.default)

    def _made_once(self, key: str, options: ModelOptions, base: Provider | None) -> Provider:
        found = self._made.get((key, options))
        if found is None:
            found = (
                base.with_options(options)
                if base
                else build_model(key, options=options, env=self._env)
            )
            self._made[(key, options)] = found
        return found
