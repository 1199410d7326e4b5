"""Demo scenarios: scripted session trees with real shell commands and real timing."""
