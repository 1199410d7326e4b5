"""Tools a session's model can call: shell, session tools, workspace files."""
