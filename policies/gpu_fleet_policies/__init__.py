"""gpu-fleet's policy validators, importable without starting the pack (tests call them)."""
