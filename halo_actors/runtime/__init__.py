"""The runtime: session actors, the supervisor that owns them, agent profiles."""
