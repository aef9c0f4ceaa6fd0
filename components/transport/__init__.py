"""How a command reaches a host: OpenSSH, multiplexed, host keys verified, secrets masked."""

from .command import MASK, Secret, display, mask, shell_join
from .fanout import FanOutError, fan_out
from .ssh import (
    AuthFailed, Connection, HostError, HostKeyMismatch, HostRemembered, HostUnreachable,
    Result, RunStopped, SshTarget, SudoPasswordRequired, connection,
)

__all__ = [
    "MASK", "Secret", "display", "mask", "shell_join", "AuthFailed", "Connection",
    "FanOutError", "HostError", "HostKeyMismatch", "HostRemembered", "HostUnreachable", "Result",
    "RunStopped", "SshTarget", "SudoPasswordRequired", "connection", "fan_out",
]
