"""A profile may name its model and set its responses' options; both are checked when
the profile loads, and each agent's requests go to its own model."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from provider_kit import BUDGET, OPENAI, reply_text, serving
from wire_formats import Turn

from halo_actors import ScriptedModel, Step, open_runtime
from halo_actors.agent.scripted import Rule, Script
from halo_actors.core.errors import ProfileError
from halo_actors.core.events import AssistantReplied
from halo_actors.core.log import EventFilter
from halo_actors.runtime.profiles import load_profile


def write(tmp_path: Path, text: str, name: str = "coder") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_profile_names_its_model_and_options(tmp_path: Path) -> None:
    profile = load_profile(
        write(
            tmp_path,
            'model = "anthropic:claude-sonnet-4-5"\nmax_tokens = 8000\nthinking_budget = 2000\n'
            "[limits]\nmax_tokens = 200000\ncompress_at = 150000\n",
        )
    )
    assert profile.model == "anthropic:claude-sonnet-4-5"
    options = profile.model_options()
    assert (options.max_tokens, options.thinking_budget) == (8000, 2000)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('model = "gpt-4"', "`model`: model 'gpt-4' is not a model spec; use `anthropic:<model>`"),
        ('model = "mistral:large"', "is not a model spec"),
        (
            'model = "anthropic:claude"\ntemperature = 0.3',
            "`temperature` cannot be set for Anthropic",
        ),
        ('model = "openai:gpt-4.1"\ntemperature = 2.5', "Expected `float` <= 2"),
        (
            'model = "anthropic:claude"\nthinking_budget = 500',
            "`thinking_budget` must be at least 1024",
        ),
        (
            'model = "anthropic:claude"\nmax_tokens = 4000\nthinking_budget = 4000',
            "`thinking_budget` (4000) must be below `max_tokens` (4000)",
        ),
        ("max_tokens = 0", "Expected `int` >= 1 - at `$.max_tokens`"),
        ("max_tokens = 300000", "`max_tokens` (300000) must be below the context window"),
        (
            "[limits]\nmax_tokens = 1000\ncompress_at = 1000",
            "`limits.compress_at` (1000) must be below",
        ),
    ],
)
def test_model_settings_are_validated_at_load(tmp_path: Path, text: str, says: str) -> None:
    """Rule: a profile's model, max_tokens, temperature, thinking budget and context window
    are validated at load, with an error that says what is wrong."""
    with pytest.raises(ProfileError) as caught:
        load_profile(write(tmp_path, text))
    assert str(caught.value).startswith("coder.toml: ")
    assert says in str(caught.value)


async def test_each_profile_runs_on_its_own_model(tmp_path: Path) -> None:
    """Per-profile models: ``coder`` names an OpenAI-compatible model; ``default`` keeps
    the runtime's (scripted) model."""
    agents = tmp_path / "ws" / ".halo" / "agents"
    agents.mkdir(parents=True)
    (agents / "coder.toml").write_text('model = "openai:qwen2.5-coder"\nmax_tokens = 300\n')
    scripted = ScriptedModel({}, fallback=Script(rules=(Rule(steps=(Step(text="scripted"),)),)))
    async with serving(OPENAI) as server:
        server.queue(OPENAI.stream(Turn(text="from the server")))
        with pytest.MonkeyPatch.context() as env:
            for name, value in OPENAI.env(server).items():
                env.setenv(name, value)
            async with open_runtime(tmp_path / "ws", model=scripted, durable=False) as sup:
                with trio.fail_after(BUDGET):
                    coder = await sup.create_session(agent_id="coder")
                    plain = await sup.create_session()
                    await sup.send(coder, "hi")
                    await sup.send(plain, "hi")
                    await sup.wait_all_idle()
                    records = await sup.log.read(EventFilter())
    said = {
        r.session_id: reply_text(r.event) for r in records if isinstance(r.event, AssistantReplied)
    }
    assert said == {coder: "from the server", plain: "scripted"}
    assert server.bodies[0]["model"] == "qwen2.5-coder" and server.bodies[0]["max_tokens"] == 300


async def test_a_missing_key_stops_the_runtime_from_opening(tmp_path: Path) -> None:
    """Rule: a missing key for a host that needs one is a clear startup error naming the
    variable."""
    from halo_actors import ModelConfigError

    with pytest.MonkeyPatch.context() as env:
        env.delenv("ANTHROPIC_API_KEY", raising=False)
        env.delenv("ANTHROPIC_BASE_URL", raising=False)
        with pytest.raises(ModelConfigError, match="set ANTHROPIC_API_KEY"):
            async with open_runtime(tmp_path, model="anthropic:claude-sonnet-4-5", durable=False):
                pass


async def test_a_profile_whose_model_has_no_key_breaks_only_that_profile(tmp_path: Path) -> None:
    """A profile naming a provider whose key is missing is broken like a broken file: its
    sessions fail with the variable named; the other profiles keep working."""
    agents = tmp_path / "ws" / ".halo" / "agents"
    agents.mkdir(parents=True)
    (agents / "writer.toml").write_text('model = "anthropic:claude-sonnet-4-5"\n')
    with pytest.MonkeyPatch.context() as env:
        env.delenv("ANTHROPIC_API_KEY", raising=False)
        env.delenv("ANTHROPIC_BASE_URL", raising=False)
        async with open_runtime(tmp_path / "ws", durable=False) as sup:
            with trio.fail_after(BUDGET):
                assert sup.profiles.get("writer") is None
                problem = sup.profiles.problem("writer")
                assert problem is not None and "set ANTHROPIC_API_KEY" in str(problem)
                plain = await sup.create_session()
                await sup.send(plain, "hi")
                await sup.wait_idle(plain)
