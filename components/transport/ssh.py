"""OpenSSH transport: one multiplexed connection per host, host keys always verified.

Why OpenSSH and not a Python client: it honours the user's ~/.ssh/config
(User, IdentityFile, ProxyJump), agents and bastions exactly as the admin's own
`ssh` does, and ControlMaster makes every command after the first a ~10 ms
round trip on the existing connection. Nothing here lives on a provider
object: the control sockets are on disk, keyed by target, and shared by every
call in the provider process.

Failure policy: connecting (`connect`) is read-only and retried with
backoff; a command itself is never retried, so a mutating step cannot run
twice. Every error names the host, the command (secrets masked), the exit code
and the output (masked).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence, TypeVar

from ..errors import FleetError
from .command import Piece, display, mask, secrets_of, shell_join

COMMAND_LOG_ENV = "GPU_FLEET_COMMAND_LOG"
T = TypeVar("T")


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
            msg += f"\n  output:\n    " + tail.replace("\n", "\n    ")
        super().__init__(msg)


class HostUnreachable(HostError):
    """No SSH connection could be made (address, port, routing, timeout)."""


class HostKeyMismatch(HostError):
    """The host's key is unknown or differs from known_hosts: never connect anyway."""


class AuthFailed(HostError):
    """The server refused our key, or the key file is missing."""


class SudoPasswordRequired(HostError):
    """The SSH user is not root and `sudo -n` wants a password: configure NOPASSWD."""


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
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SshTarget":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str


def _control_dir() -> Path:
    # Unix socket paths are limited to 108 bytes: keep the directory short.
    d = Path(tempfile.gettempdir()) / f"gfssh-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def ssh_argv(t: SshTarget) -> list[str]:
    """The ssh invocation for a target, up to (not including) the remote command."""
    argv = ["ssh"]
    if not t.use_ssh_config:
        argv += ["-F", "/dev/null"]
    opts = {
        "BatchMode": "yes",
        "StrictHostKeyChecking": "yes",
        "ConnectTimeout": str(t.connect_timeout_s),
        "ServerAliveInterval": "15",
        "ServerAliveCountMax": "3",
        "ControlMaster": "auto",
        "ControlPersist": "120",
        # One master per full target: a different key, known_hosts or jump host must
        # never ride on a connection that was verified with other settings.
        "ControlPath": str(_control_dir() / hashlib.sha256(repr(t).encode()).hexdigest()[:20]),
        "LogLevel": "ERROR",
    }
    if t.known_hosts_file:
        opts["UserKnownHostsFile"] = t.known_hosts_file
        opts["GlobalKnownHostsFile"] = "/dev/null"
    if t.identity_file:
        opts["IdentityFile"] = t.identity_file
        opts["IdentitiesOnly"] = "yes"
    if t.proxy_jump:
        opts["ProxyJump"] = t.proxy_jump
    for k, v in opts.items():
        argv += ["-o", f"{k}={v}"]
    argv += ["-p", str(t.port), "-l", t.user, t.address]
    return argv


_log_lock = threading.Lock()


def _log_command(host: str, cmd: str, mutating: bool, rc: Optional[int], seconds: float) -> None:
    """Append one JSON line per round trip when GPU_FLEET_COMMAND_LOG names a file."""
    path = os.environ.get(COMMAND_LOG_ENV)
    if not path:
        return
    rec = {"host": host, "cmd": cmd, "mutating": mutating, "rc": rc, "s": round(seconds, 4),
           "pid": os.getpid(), "t": time.time()}
    with _log_lock, open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def _classify(t: SshTarget, cmd: str, rc: int, out: str) -> HostError:
    low = out.lower()
    if rc == 255:
        if "host key verification failed" in low or "remote host identification has changed" in low \
                or "no matching host key" in low or "host key for" in low:
            return HostKeyMismatch(t.name, cmd, rc, out,
                                   f"host key of {t.address} is not the one in known_hosts "
                                   f"({t.known_hosts_file or '~/.ssh/known_hosts'}); refusing to connect")
        if "permission denied" in low:
            return AuthFailed(t.name, cmd, rc, out, f"{t.user}@{t.address} refused our key")
        return HostUnreachable(t.name, cmd, rc, out, f"cannot reach {t.address}:{t.port} over SSH")
    if "sudo: a password is required" in low or "sudo: a terminal is required" in low:
        return SudoPasswordRequired(t.name, cmd, rc, out,
                                    f"user {t.user} needs passwordless sudo (NOPASSWD) for gpu-fleet")
    return HostError(t.name, cmd, rc, out)


class Connection:
    """Runs commands on one host over its multiplexed SSH connection."""

    def __init__(self, target: SshTarget):
        self.t = target
        self._connected = False
        self._lock = threading.Lock()

    def _master_alive(self) -> bool:
        """A live control master (local check, no round trip to the host)."""
        p = subprocess.run([*ssh_argv(self.t)[:-1], "-O", "check", self.t.address],
                           capture_output=True, timeout=10)
        return p.returncode == 0

    def _check_files(self) -> None:
        t = self.t
        for what, f in (("identity_file", t.identity_file), ("known_hosts_file", t.known_hosts_file)):
            if f and not Path(f).is_file():
                raise AuthFailed(t.name, "ssh", None, "", f"ssh.{what} {f} does not exist")

    def connect(self, retries: int = 3, backoff_s: float = 1.0) -> None:
        """Open the control connection once per process; read-only, so retried on transport
        errors. Later commands reopen a lapsed master by themselves (ControlMaster=auto)."""
        self._check_files()
        with self._lock:  # concurrent provider calls for one host open one connection
            if self._connected or self._master_alive():
                self._connected = True
                return
            self._open(retries, backoff_s)

    def _open(self, retries: int, backoff_s: float) -> None:
        last: Optional[HostError] = None
        for attempt in range(retries):
            try:
                self.run(["true"], mutating=False, sudo=False, check=True, _connecting=True)
                self._connected = True
                return
            except (HostKeyMismatch, AuthFailed):
                raise
            except HostUnreachable as e:
                last = e
                time.sleep(backoff_s * (2 ** attempt))
        assert last is not None
        raise last

    def run(self, argv: Sequence[Piece], *, mutating: bool, sudo: bool = True,
            stdin: Optional[bytes] = None, check: bool = True, timeout: int = 600,
            stdin_secret: bool = False, _connecting: bool = False) -> Result:
        """Run argv on the host. `mutating` is recorded in the command log; `sudo` adds
        `sudo -n` when the SSH user is not root. A stdin marked secret is masked in output."""
        if not _connecting:
            self._check_files()
        if sudo and self.t.user != "root":
            argv = ["sudo", "-n", "--", *argv]
        cmd = display(argv)
        secrets = secrets_of(argv, [stdin.decode(errors="replace")] if (stdin and stdin_secret) else [])
        start = time.monotonic()
        try:
            p = subprocess.run(
                [*ssh_argv(self.t), "--", shell_join(argv)],
                input=stdin if stdin is not None else b"", capture_output=True, timeout=timeout,
            )
        except subprocess.TimeoutExpired as e:
            _log_command(self.t.name, cmd, mutating, None, time.monotonic() - start)
            out = mask(((e.stdout or b"") + (e.stderr or b"")).decode(errors="replace"), secrets)
            raise HostError(self.t.name, cmd, None, out, f"timed out after {timeout} s") from None
        _log_command(self.t.name, cmd, mutating, p.returncode, time.monotonic() - start)
        res = Result(p.returncode, mask(p.stdout.decode(errors="replace"), secrets),
                     mask(p.stderr.decode(errors="replace"), secrets))
        if check and p.returncode != 0:
            raise _classify(self.t, cmd, p.returncode, res.stdout + res.stderr)
        return res


_connections: dict[SshTarget, Connection] = {}
_conn_lock = threading.Lock()


def connection(target: SshTarget) -> Connection:
    """The provider process's connection for a target (module-level cache, thread-safe)."""
    with _conn_lock:
        c = _connections.get(target)
        if c is None:
            c = _connections[target] = Connection(target)
    return c


class FanOutError(FleetError):
    """Some hosts failed in a fan-out; says which failed and which completed."""

    def __init__(self, failures: dict[str, Exception], done: list[str]):
        self.failures, self.done = failures, done
        lines = [f"{len(failures)} host(s) failed:"]
        lines += [f"  - {h}: {e}" for h, e in sorted(failures.items())]
        lines.append(f"  completed on: {', '.join(sorted(done)) or 'no host'}")
        super().__init__("\n".join(lines))


def fan_out(targets: Iterable[SshTarget], fn: Callable[[Connection], T],
            max_parallel: int = 16) -> dict[str, T]:
    """Run fn on every host in parallel (bounded); raise FanOutError naming each failure."""
    targets = list(targets)
    results: dict[str, T] = {}
    failures: dict[str, Exception] = {}

    def one(t: SshTarget):
        try:
            results[t.name] = fn(connection(t))
        except Exception as e:  # noqa: BLE001 - reported per host below
            failures[t.name] = e

    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(targets) or 1))) as ex:
        list(ex.map(one, targets))
    if failures:
        raise FanOutError(failures, list(results))
    return results
