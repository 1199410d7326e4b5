"""The agent layer: model protocol, scripted model, turn loop, conversation repair."""
