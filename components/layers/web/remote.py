"""The layer's host scripts (scripts/*.sh, all bash), loaded once, and how they are run."""

from __future__ import annotations

from ...scripts import script, script_path
from ...transport import Connection, SshTarget, connection

LIFECYCLE = script(__file__, "lifecycle.sh")
READBACK = script(__file__, "readback.sh")
CHECK = script(__file__, "check.sh")
TOKEN_PROBE = script(__file__, "token_probe.sh")
TAILNET = script(__file__, "tailnet.sh")
#: run by the controller's own units (installed whole, header included, and run by their #!)
TOKEN_SH = script_path(__file__, "token.sh").read_text(encoding="utf-8")
HEALTH_SH = script_path(__file__, "health.sh").read_text(encoding="utf-8")


def sh(text: str, *args: str) -> list[str]:
    return ["bash", "-c", text, "bash", *args]


def connect(d: dict) -> Connection:
    c = connection(SshTarget.from_dict(d))
    c.connect()
    return c
