"""Read-only facts about a host: each is one command and a pure parser, as in pyinfra's facts.

The command is a shell function in `scripts/<fact>.sh` (or an argv built by the fact's
module) and the parser, text in and typed values out, sits in `<fact>.py`. A primitive or a
check that reads several facts in one round trip sends the functions ahead of its own probe
script (`shell("mounts", "zfs") + script(__file__, "probe.sh")`), so each fact's command line
is spelled once, here, and what it prints is parsed once. Nothing here imports a layer.
"""

from __future__ import annotations

from ..scripts import script


def shell(*names: str) -> str:
    """The shell functions of the named facts (`scripts/<name>.sh`), to send ahead of a probe."""
    return "".join(script(__file__, f"{n}.sh") for n in names)
