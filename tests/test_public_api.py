"""The public names are a contract: adding or removing one is a deliberate change."""

from __future__ import annotations

import halo_actors


def test_public_names_are_pinned() -> None:
    assert sorted(halo_actors.__all__) == [
        "AgentProfile",
        "EventFilter",
        "HaloError",
        "Limits",
        "MemoryEventLog",
        "Profiles",
        "Rule",
        "Script",
        "ScriptedCall",
        "ScriptedModel",
        "SqliteEventLog",
        "Step",
        "Supervisor",
        "__version__",
        "open_runtime",
        "open_supervisor",
    ]
    for name in halo_actors.__all__:
        assert getattr(halo_actors, name) is not None


def test_version_matches_the_package_metadata() -> None:
    from importlib.metadata import version

    assert halo_actors.__version__ == version("halo_actors")
