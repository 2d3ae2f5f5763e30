"""The `kdra` command: thin wiring, no logic of its own."""
