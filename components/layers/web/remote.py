"""The layer's host scripts (scripts/*.sh, all bash), loaded once; they run with kit.bash."""

from __future__ import annotations

from ...scripts import installed, script
from ...kit import bash, connect

__all__ = ["CHECK", "HEALTH_SH", "LIFECYCLE", "READBACK", "TAILNET", "TOKEN_PROBE", "TOKEN_SH", "TOKEN_START", "WAIT",
           "WAIT_SH", "WEB_KEY", "bash", "connect"]

LIFECYCLE = script(__file__, "lifecycle.sh")
READBACK = script(__file__, "readback.sh")
CHECK = script(__file__, "check.sh")
TOKEN_PROBE = script(__file__, "token_probe.sh")
TOKEN_START = script(__file__, "token_start.sh")
TAILNET = script(__file__, "tailnet.sh")
WEB_KEY = script(__file__, "web_key.sh")
WAIT = script(__file__, "wait.sh")
#: run by the controller's own units (installed whole, header included, and run by their #!)
TOKEN_SH = installed(__file__, "token.sh")
HEALTH_SH = installed(__file__, "health.sh")
WAIT_SH = installed(__file__, "wait.sh")

