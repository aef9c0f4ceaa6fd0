"""A host for unit tests of the primitives: the real `Connection`, with a local /bin/sh where
OpenSSH would open the remote shell.

Everything above that process boundary is the real transport: the `sudo -n` prefix, piece
quoting, stdin, secret masking, the error classes, the command log. The providers reach it
through the one seam they use (`components.providers.base.connection`, the module-level
cache), so their real probe / plan / apply scripts run against the local filesystem: point
them at paths under pytest's tmp_path. No root, no sshd.

The local shell defines `sudo` as "run it", as a fleet host with NOPASSWD sudo would, so a
target whose user is not root works too (and its commands show the prefix).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pulumi.runtime import rpc

from components.providers import base
from components.transport import Connection, SshTarget, display, ssh

# ssh's last argument is the remote command line; the remote shell runs it.
LOCAL_SHELL = r"""
for cmd; do :; done
sudo() { [ "$1" = -n ] && shift; [ "$1" = -- ] && shift; "$@"; }
eval "$cmd"
"""


@dataclass(frozen=True)
class Sent:
    """One command as the provider sent it (secret pieces masked); `trip`: the round trip it
    went in (the steps of a sequence and the read after them share one, transport/sequence.py)."""

    target: SshTarget
    cmd: str
    mutating: bool
    trip: int = 0


def unpack(argv) -> list[tuple[str, bool]] | None:
    """A sequence's commands (line, mutating) as transport/sequence.py sent them; None for a
    plain command."""
    if len(argv) < 4 or argv[3] != "gf-seq":
        return None
    pairs = list(argv[4:])
    return [(line, spec != "read") for spec, line in zip(pairs[::2], pairs[1::2])]


class LocalConnection(Connection):
    """A Connection whose commands run in a local shell; every one is recorded in `sent`."""

    def __init__(self, target: SshTarget, sent: list[Sent]):
        super().__init__(target)
        self.sent = sent

    def connect(self, retries: int = 3, backoff_s: float = 1.0) -> None:
        self._check_files()
        self._connected = True

    def run(self, argv, *, mutating: bool, **kw):
        trip = max((s.trip for s in self.sent), default=0) + 1
        inner = unpack(argv)
        for cmd, m in inner or [(display(argv), mutating)]:
            self.sent.append(Sent(self.t, cmd, m, trip))
        return super().run(argv, mutating=mutating, **kw)


class FakeHosts:
    """The provider process's connections in a test, and every command they were sent."""

    def __init__(self):
        self.sent: list[Sent] = []
        self._conns: dict[SshTarget, LocalConnection] = {}

    def connection(self, target: SshTarget) -> LocalConnection:
        if target not in self._conns:
            self._conns[target] = LocalConnection(target, self.sent)
        return self._conns[target]

    def mutating(self) -> list[str]:
        return [s.cmd for s in self.sent if s.mutating]

    def round_trips(self) -> int:
        return len({s.trip for s in self.sent})

    def clear(self) -> None:
        self.sent.clear()


def install(monkeypatch) -> FakeHosts:
    hosts = FakeHosts()
    monkeypatch.setattr(base, "connection", hosts.connection)
    # what primitives keep on their host (providers/kept.py): this test's own, not the machine's
    # (a folder of its own, gone with the test run: some tests assert the folder itself vanishes)
    kept_dir = tempfile.mkdtemp(prefix="gf-kept-")
    atexit.register(shutil.rmtree, kept_dir, True)
    monkeypatch.setenv("GPU_FLEET_KEPT_DIR", kept_dir)
    monkeypatch.setattr(ssh, "ssh_argv", lambda t: ["/bin/sh", "-c", LOCAL_SHELL, f"fake-ssh-{t.name}"])
    return hosts


def recorded(outs: dict) -> dict:
    """Outputs as the engine records them and hands them back (None values dropped, numbers
    as floats): what the next read, diff or delete receives."""
    # A loop of its own: asyncio.run would close the thread's current loop, which later
    # tests (pulumi's mocks) still use.
    loop = asyncio.new_event_loop()
    try:
        return rpc.deserialize_properties(loop.run_until_complete(rpc.serialize_properties(outs, {})))
    finally:
        loop.close()


def kept_on_host(kind: str, key: str):
    """The record a primitive keeps on its (local) host for `key` (providers/kept.py), or None."""
    from components.providers import kept

    path = Path(kept.path_of(kind, key))
    return json.loads(path.read_text())["record"] if path.exists() else None
