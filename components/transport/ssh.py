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

A host that cannot be reached on connect (refused, timed out, no route: after the retries)
is remembered for the rest of the provider process, which is one `pulumi` run: every later
connect or command to it fails at once with one sentence (`HostRemembered`), so N resources
on a dead host cost one connect timeout, not N. A host key mismatch or a refused key is
never remembered: each is reported where it happens. The memory is reach.py; running one
function on many hosts at once is fanout.py.

Commands run through `lifeline.spawn`, so a cancelled run (Ctrl-C) or a dead engine stops
them (`RunStopped`); see lifeline.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

from . import lifeline
from .batch import Batcher, batchable
from .refresh import HostReading
from .command import Piece, display, mask, secrets_of, shell_join
from .reach import reach_lock_of, remember, remembered
from .target import (  # HostError .. RunStopped, Result and SshTarget are this transport's API
    AuthFailed, HostError, HostKeyMismatch, HostRemembered, HostUnreachable, Result, RunStopped, SshTarget,
    SudoPasswordRequired, acting_label,
)

COMMAND_LOG_ENV = "GPU_FLEET_COMMAND_LOG"
#: commands at once on one host's connection: sshd refuses sessions past MaxSessions (10 by
#: default) on one multiplexed connection, and the provider serves up to 32 calls at once
MAX_SESSIONS = 8

lifeline.install()  # in the engine's provider process: Cancel and the engine's death stop commands


def _control_dir() -> Path:
    """Where the ssh masters' sockets live: one directory per user and network namespace. A
    master reaches an address in the namespace it was opened in, and the same address in
    another namespace is another host (a second lab beside the first, scripts/lab-ns.sh).
    Unix socket paths are limited to 108 bytes: the name stays short."""
    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:  # no procfs: one namespace as far as this process can tell
        netns = 0
    d = Path(tempfile.gettempdir()) / f"gfssh-{os.getuid()}-{netns}"
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


def _log_command(host: str, cmd: str, mutating: bool, rc: Optional[int], seconds: float,
                 sent_for: Optional[list] = None) -> None:
    """Append one JSON line per round trip when GPU_FLEET_COMMAND_LOG names a file; `for`: the
    resources it was sent for (several for a batch of probes)."""
    path = os.environ.get(COMMAND_LOG_ENV)
    if not path:
        return
    if sent_for is None:
        sent_for = [acting_label()] if acting_label() else []
    rec = {"host": host, "cmd": cmd, "mutating": mutating, "rc": rc, "s": round(seconds, 4),
           "pid": os.getpid(), "t": time.time(), "for": sent_for}
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
        self._batcher = Batcher(self)
        self._reading = HostReading(target)
        self._sessions = threading.BoundedSemaphore(MAX_SESSIONS)

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

    def _refuse_if_remembered(self, cmd: str) -> None:
        dead = remembered(self.t)
        if dead is not None:
            raise HostRemembered(self.t.name, cmd, dead.where, dead.first_at)

    def connect(self, retries: int = 3, backoff_s: float = 1.0) -> None:
        """Open the control connection once per process; read-only, so retried on transport
        errors. Later commands reopen a lapsed master by themselves (ControlMaster=auto).
        A host that stays unreachable through the retries is remembered for this run."""
        self._check_files()
        # concurrent provider calls for one host open one connection; a failed one is remembered
        with reach_lock_of(self.t), self._lock:
            self._refuse_if_remembered("ssh")
            if self._connected or self._master_alive():
                self._connected = True
                return
            try:
                self._open(retries, backoff_s)
            except HostUnreachable:
                remember(self.t)
                raise

    def _open(self, retries: int, backoff_s: float) -> None:
        last: Optional[HostError] = None
        for attempt in range(retries):
            if attempt:
                time.sleep(backoff_s * (2 ** (attempt - 1)))
            try:
                self.run(["true"], mutating=False, sudo=False, check=True, _connecting=True)
                self._connected = True
                return
            except (HostKeyMismatch, AuthFailed, RunStopped):
                raise
            except HostUnreachable as e:
                last = e
        assert last is not None
        raise last

    def run(self, argv: Sequence[Piece], *, mutating: bool, sudo: bool = True,
            stdin: Optional[bytes] = None, check: bool = True, timeout: int = 600,
            stdin_secret: bool = False, _connecting: bool = False, _errors: str = "replace",
            _for: Optional[list] = None, _secrets: Sequence[str] = (), _masked: bool = True) -> Result:
        """Run argv on the host. `mutating` is recorded in the command log; `sudo` adds
        `sudo -n` when the SSH user is not root. A stdin marked secret is masked in output.
        Fails at once on a host remembered unreachable; a mutating command is not started once
        the run is stopping, and a command in flight is ended then (`RunStopped`).
        `_secrets`: more values to mask; `_masked=False`: the result's output as it came (the
        caller masks it: sequence.py splits frames by byte counts first), errors still masked."""
        if sudo and self.t.user != "root":
            argv = ["sudo", "-n", "--", *argv]
        cmd = display(argv)
        if not _connecting:
            self._check_files()
            self._refuse_if_remembered(cmd)
        secrets = secrets_of(argv, [stdin.decode(errors="replace")] if (stdin and stdin_secret) else [])
        secrets = sorted({*secrets, *(v for v in _secrets if v)}, key=len, reverse=True)
        if mutating:
            self._reading.forget()  # what a refresh read of this host no longer holds
        with self._sessions:
            return self._run(argv, cmd, secrets, mutating=mutating, stdin=stdin, check=check, timeout=timeout,
                             _connecting=_connecting, _errors=_errors, _for=_for, _masked=_masked)

    def shown(self, argv: Sequence[Piece]) -> str:
        """argv as `run` shows it in errors and the log (the `sudo -n` it adds, secrets masked)."""
        return display(["sudo", "-n", "--", *argv] if self.t.user != "root" else list(argv))

    def _run(self, argv: Sequence[Piece], cmd: str, secrets: list[str], *, mutating: bool,
             stdin: Optional[bytes], check: bool, timeout: int, _connecting: bool, _errors: str,
             _for: Optional[list], _masked: bool = True) -> Result:
        start = time.monotonic()
        try:
            p = lifeline.spawn([*ssh_argv(self.t), "--", shell_join(argv)], mutating=mutating)
        except lifeline.Refused as e:
            raise RunStopped(self.t.name, cmd, str(e)) from None
        # subprocess.run's semantics, on a Popen that lifeline.stop can end from another thread
        try:
            stdout, stderr = p.communicate(stdin if stdin is not None else b"", timeout=timeout)
        except subprocess.TimeoutExpired as e:
            lifeline.kill(p, after_s=0)
            p.wait()
            lifeline.done(p)
            _log_command(self.t.name, cmd, mutating, None, time.monotonic() - start, _for)
            out = mask(((e.stdout or b"") + (e.stderr or b"")).decode(errors="replace"), secrets)
            raise HostError(self.t.name, cmd, None, out, f"timed out after {timeout} s") from None
        except BaseException:
            lifeline.kill(p, after_s=0)
            p.wait()
            lifeline.done(p)
            raise
        why = lifeline.done(p)  # why lifeline.stop ended it, if it did
        if p.returncode == 0:
            why = None  # it had succeeded when the stop came: that stands
        took = time.monotonic() - start
        _log_command(self.t.name, cmd, mutating, None if why else p.returncode, took, _for)
        res = Result(p.returncode, mask(stdout.decode(errors=_errors), secrets),
                     mask(stderr.decode(errors=_errors), secrets))
        if why is not None:
            raise RunStopped(self.t.name, cmd, why, took, res.stdout + res.stderr)
        if check and p.returncode != 0:
            self._fail(cmd, res, _connecting)
        if not _masked:
            return Result(p.returncode, stdout.decode(errors=_errors), stderr.decode(errors=_errors))
        return res

    def fail(self, cmd: str, res: Result) -> None:
        """Raise what a failed command means (unreachable, host key, sudo, or its exit code):
        for a command run inside another (a step of a sequence), with its own result."""
        self._fail(cmd, res)

    def _fail(self, cmd: str, res: Result, connecting: bool = False) -> None:
        """Raise what a failed command means (unreachable, host key, sudo, or its exit code)."""
        err = _classify(self.t, cmd, res.rc, res.stdout + res.stderr)
        if isinstance(err, HostUnreachable) and not connecting:
            self._connected = False  # the next connect tries again (and remembers a dead host)
        raise err

    def probe(self, argv: Sequence[Piece], *, check: bool = True, timeout: int = 600,
              refresh: bool = False) -> Result:
        """A read-only command, as `run(argv, mutating=False)`, that shares one round trip with
        this host's probes arriving at the same moment (batch.py); same result, same errors.
        `refresh`: a refresh's read, which may be answered from the host's one reading of this
        refresh (refresh.py)."""
        if self.t.user != "root":
            argv = ["sudo", "-n", "--", *argv]
        if not batchable(argv):
            return self.run(argv, mutating=False, sudo=False, check=check, timeout=timeout)
        cmd = display(argv)
        self._check_files()
        self._refuse_if_remembered(cmd)
        res = None
        if refresh:
            res = self._reading.answer(
                shell_join(argv), acting_label(),
                lambda lines, labels: self._batcher.run_many(lines, labels, timeout))
        if res is None:
            res = self._batcher.run(list(argv), timeout)
        if check and res.rc != 0:
            self._fail(cmd, res)
        return res

    def pipe(self, argv: Sequence[Piece], dst: "Connection", dst_argv: Sequence[Piece], *,
             timeout: int = 3600) -> tuple[Result, Result]:
        """Run argv here with its stdout streamed into dst_argv on another host (no copy on this
        machine, nothing decoded: a datastore or a tar goes host to host). Both commands are
        mutating in the log; each one's stderr comes back (stdout of the source is the stream).
        Fails, naming the side, unless both exit 0."""
        sides = []
        for c, a in ((self, argv), (dst, dst_argv)):
            if c.t.user != "root":
                a = ["sudo", "-n", "--", *a]
            c._check_files()
            c._refuse_if_remembered(display(a))
            sides.append((c, a, display(a)))
        start = time.monotonic()
        procs = []
        try:
            for c, a, _ in sides:
                procs.append(lifeline.spawn([*ssh_argv(c.t), "--", shell_join(a)], mutating=True))
        except lifeline.Refused as e:
            for p in procs:
                lifeline.kill(p, after_s=0)
                p.wait()
                lifeline.done(p)
            raise RunStopped(self.t.name, sides[0][2], str(e)) from None
        src, dstp = procs
        src_out, src_in, dst_in = src.stdout, src.stdin, dstp.stdin
        assert src_out is not None and src_in is not None and dst_in is not None  # spawn() pipes all three
        errs: dict[int, bytes] = {}
        moved = [0]

        def pump() -> None:
            try:
                while chunk := src_out.read(1 << 20):
                    moved[0] += len(chunk)
                    dst_in.write(chunk)
            except (BrokenPipeError, ValueError):
                pass
            finally:
                with contextlib.suppress(BrokenPipeError, ValueError, OSError):
                    dst_in.close()

        def drain(i: int, f) -> None:
            errs[i] = f.read()

        threads = [threading.Thread(target=pump, daemon=True),
                   threading.Thread(target=drain, args=(0, src.stderr), daemon=True),
                   threading.Thread(target=drain, args=(1, dstp.stdout), daemon=True),
                   threading.Thread(target=drain, args=(2, dstp.stderr), daemon=True)]
        src_in.close()
        for th in threads:
            th.start()
        deadline = start + timeout
        whys = []
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    lifeline.kill(q, after_s=0)
                p.wait()
            whys.append(lifeline.done(p))
        for th in threads:
            th.join(timeout=10)
        took = time.monotonic() - start
        results = []
        for (c, _, cmd), p, err, why in zip(sides, procs, (errs.get(0, b""), errs.get(2, b"")), whys):
            out = (errs.get(1, b"") if p is dstp else b"")
            _log_command(c.t.name, cmd, True, None if why else p.returncode, took)
            secrets = secrets_of(sides[0][1] if p is src else sides[1][1])
            results.append(Result(p.returncode, mask(out.decode(errors="replace"), secrets),
                                  mask(err.decode(errors="replace"), secrets)))
        for (c, _, cmd), p, r, why in zip(sides, procs, results, whys):
            if why is not None and p.returncode != 0:
                raise RunStopped(c.t.name, cmd, why, took, r.stdout + r.stderr)
        if time.monotonic() > deadline:
            raise HostError(self.t.name, sides[0][2], None, "",
                            f"streaming to {dst.t.name} timed out after {timeout} s")
        for (c, _, cmd), p, r in zip(sides, procs, results):
            if p.returncode != 0:
                raise _classify(c.t, cmd + (f" (streaming to {dst.t.name})" if p is src else
                                            f" (streamed from {self.t.name}, {moved[0]} bytes)"),
                                p.returncode, r.stdout + r.stderr)
        return results[0], results[1]


_connections: dict[SshTarget, Connection] = {}
_conn_lock = threading.Lock()


def connection(target: SshTarget) -> Connection:
    """The provider process's connection for a target (module-level cache, thread-safe)."""
    with _conn_lock:
        c = _connections.get(target)
        if c is None:
            c = _connections[target] = Connection(target)
    return c
