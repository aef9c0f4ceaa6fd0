"""What every transport module shares: a host target, what a command returned, how a command
failed, and which resource a thread's commands are sent for.

Kept apart from ssh.py so that batch.py and refresh.py, which ssh.py builds on, use these
without importing ssh.py back.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import asdict, dataclass
from typing import Optional

from ..errors import FleetError


class HostError(FleetError):
    """A command on a host failed; carries host, masked command, exit code and output."""

    def __init__(self, host: str, command: str, rc: Optional[int], output: str, hint: str = ""):
        self.host, self.command, self.rc, self.output = host, command, rc, output
        msg = f"host {host}: `{command}` failed"
        msg += f" with exit code {rc}" if rc is not None else ""
        if hint:
            msg += f": {hint}"
        if output.strip():
            tail = "\n".join(output.strip().splitlines()[-15:])
            msg += "\n  output:\n    " + tail.replace("\n", "\n    ")
        super().__init__(msg)


class HostUnreachable(HostError):
    """No SSH connection could be made (address, port, routing, timeout)."""


class HostKeyMismatch(HostError):
    """The host's key is unknown or differs from known_hosts: never connect anyway."""


class AuthFailed(HostError):
    """The server refused our key, or the key file is missing."""


class SudoPasswordRequired(HostError):
    """The SSH user is not root and `sudo -n` wants a password: configure NOPASSWD."""


class HostRemembered(HostUnreachable):
    """The host could not be reached earlier in this run: not tried again."""

    def __init__(self, host: str, command: str, where: str, first_at: float):
        self.host, self.command, self.rc, self.output = host, command, None, ""
        self.where, self.first_at = where, first_at
        at = time.strftime("%H:%M:%S", time.localtime(first_at))
        FleetError.__init__(self, f"host {host}: cannot reach {where} over SSH (remembered from the "
                                  f"first try at {at}; not tried again this run)")


class RunStopped(HostError):
    """A command was not started, or was ended, because the run is stopping (lifeline.py)."""

    def __init__(self, host: str, command: str, why: str, ran_s: Optional[float] = None,
                 output: str = ""):
        self.host, self.command, self.rc, self.output, self.why = host, command, None, output, why
        if ran_s is None:
            msg = f"host {host}: `{command}` not started: {why}"
        else:
            msg = (f"host {host}: `{command}` stopped after {ran_s:.1f} s: {why}\n"
                   f"  it may have partly run on the host; the next `pulumi up` probes the host first "
                   f"and finishes it")
        FleetError.__init__(self, msg)


@dataclass(frozen=True)
class SshTarget:
    """Where and how to reach one host. No secret here: keys stay in files or the agent."""

    name: str
    address: str
    port: int = 22
    user: str = "root"
    identity_file: Optional[str] = None
    known_hosts_file: Optional[str] = None
    proxy_jump: Optional[str] = None
    use_ssh_config: bool = True
    connect_timeout_s: int = 10

    def as_dict(self) -> dict:
        """The fields that differ from their defaults (name and address always): a host
        primitive's `conn`, twice in each resource's state (issue 16: ~1.7 KB a node);
        `from_dict` fills the defaults back in, and diffs compare parsed targets."""
        d = asdict(self)
        return {k: v for k, v in d.items()
                if k in ("name", "address") or v != self.__dataclass_fields__[k].default}

    @classmethod
    def from_dict(cls, d: dict) -> "SshTarget":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str


_acting = threading.local()


@contextlib.contextmanager
def acting_for(label: str):
    """Commands this thread sends meanwhile are logged as sent for `label` (a resource)."""
    before = getattr(_acting, "label", None)
    _acting.label = label
    try:
        yield
    finally:
        _acting.label = before


def acting_label() -> Optional[str]:
    return getattr(_acting, "label", None)
