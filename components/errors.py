"""The one exception hierarchy of gpu-fleet.

Every failure the program reports derives from FleetError, so `__main__`
can turn any of them into a clean `pulumi.RunError` (no traceback) and tests
can assert on one type. Messages name the stack, field, host or command;
they never carry a secret value.
"""

from __future__ import annotations


class FleetError(Exception):
    """Base of every error gpu-fleet raises on purpose."""


class ConfigError(FleetError):
    """The stack configuration is invalid; raised before any host is touched.

    `problems` holds one line per field ("<field path>: <reason>") so callers
    can show all of them at once instead of one per run.
    """

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  {source}: {p}" for p in self.problems)
        super().__init__(f"invalid stack configuration in {source}:\n{lines}")
