"""A resource's planned steps, and the read that checks them, in one SSH round trip (issue 16).

An apply used to send each planned step as its own command and then read the host again:
a unit's start was three round trips, a package set's refresh, install and hold five, and a
first converge sent ~38 commands a node, each one sshd session, shell and wait more on a
host that is busy installing. Now the steps go in order in one command (scripts/sequence.sh),
the read after them in the same one, and each step still gets exactly the result it would
have had alone: its own exit code, stdout and stderr, framed by byte counts. The first step
that fails stops the sequence and raises the error its own command would have raised (host,
the step's command, its exit code and output); nothing after it runs. A connection lost
mid-sequence (sshd stopped, the host gone) is the step in flight's: `HostUnreachable` naming
that step, as it would have been alone. A step's stdin is handed to that step alone, byte
for byte.

Never retried, never reordered: a sequence is what the plan said, once. Writing each frame
is the check that the client is still there, so a stopped run (lifeline.py) starts no
further step on the host. A step with secret pieces in its command line runs alone, as do
stdins over `MAX_STDIN` (they are held in the client's memory once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol, Sequence

from ..scripts import script
from . import frames
from .command import Piece, Secret, mask, shell_join

if TYPE_CHECKING:
    from .ssh import Connection, Result

_SCRIPT = script(__file__, "sequence.sh")
_FRAME = b"== gf-seq "
#: a sequence's stdin is every step's stdin in one buffer; larger ones go alone
MAX_STDIN = 8 << 20
#: command-line bytes a sequence (one string to the remote shell: Linux caps one at 128 KiB)
MAX_BYTES = 64 * 1024


class Planned(Protocol):
    """What a sequence runs (providers.base.Step is one); read-only, as a frozen dataclass's fields are."""

    @property
    def argv(self) -> Sequence[Piece]: ...
    @property
    def stdin(self) -> Optional[bytes]: ...
    @property
    def stdin_secret(self) -> bool: ...


def _alone(step: Planned) -> bool:
    return any(isinstance(p, Secret) for p in step.argv) or len(step.stdin or b"") > MAX_STDIN


def chunks(steps: Sequence[Planned]) -> list[list[Planned]]:
    """Steps in order, in as few sequences as the caps allow (each alone-step its own)."""
    out: list[list[Planned]] = []
    size = stdin = 0
    for s in steps:
        line = len(shell_join(s.argv)) + 16
        n = len(s.stdin or b"")
        if _alone(s) or not out or _alone(out[-1][-1]) or size + line > MAX_BYTES or stdin + n > MAX_STDIN:
            out.append([s])
            size, stdin = line, n
        else:
            out[-1].append(s)
            size, stdin = size + line, stdin + n
    return out


def split_frames(out: bytes) -> list[tuple[int, bytes, bytes]]:
    """sequence.sh's stdout -> (exit code, stdout, stderr) of each command that ran, in order;
    ValueError when a frame is cut short or out of order."""
    return frames.split(out, _FRAME)


def run_sequence(conn: "Connection", steps: Sequence[Planned], then: Optional[Sequence[Piece]] = None,
                 timeout: int = 600) -> Optional["Result"]:
    """Run `steps` in order on conn's host, in as few round trips as `chunks` allows, and
    then the read-only `then` in the last of them: its result (None without `then`). Raises
    the first failing step's (or the read's) error, as its own command would have."""

    groups = chunks(steps)
    if not groups:
        return conn.probe(list(then), timeout=timeout) if then is not None else None
    read = list(then) if then is not None and not any(isinstance(p, Secret) for p in then) else None
    got: Optional[Result] = None
    for i, group in enumerate(groups):
        last = i == len(groups) - 1
        got = _send(conn, group, read if last else None, timeout)
    if then is not None and read is None:
        return conn.probe(list(then), timeout=timeout)
    return got


def _send(conn: "Connection", group: list[Planned], read: Optional[list[Piece]],
          timeout: int) -> Optional["Result"]:
    from .ssh import HostError, Result

    if len(group) == 1 and read is None:
        s = group[0]
        conn.run(s.argv, mutating=True, stdin=s.stdin, stdin_secret=s.stdin_secret, timeout=timeout)
        return None
    args: list[Piece] = []
    for s in group:
        args += [str(len(s.stdin)) if s.stdin else "-", shell_join(s.argv)]
    if read is not None:
        args += ["read", shell_join(read)]
    stdin = b"".join(s.stdin or b"" for s in group)
    secrets = [s.stdin.decode(errors="replace") for s in group if s.stdin and s.stdin_secret]
    cmds = [conn.shown(s.argv) for s in group] + ([conn.shown(read)] if read is not None else [])
    res = conn.run(["sh", "-c", _SCRIPT, "gf-seq", *args], mutating=True, stdin=stdin or None,
                   check=False, timeout=timeout * len(cmds), _errors="surrogateescape",
                   _secrets=secrets, _masked=False)
    raw = res.stdout.encode(errors="surrogateescape")
    try:
        got = split_frames(raw)
    except ValueError as e:
        raise HostError(conn.t.name, cmds[0], res.rc, mask(res.stdout + res.stderr, secrets),
                        f"a sequence of {len(cmds)} commands: its output was cut off ({e})") from None
    for k, (rc, out, err) in enumerate(got):
        r = Result(rc, mask(out.decode(errors="replace"), secrets), mask(err.decode(errors="replace"), secrets))
        if rc != 0:
            conn.fail(cmds[k], r)
        if read is not None and k == len(cmds) - 1:
            return r
    if len(got) < len(cmds):
        # ssh or sudo failed before the script ran (the first step meets it), or the connection
        # went while a step ran (sshd stopped, host down): that step meets it, as it would alone
        if res.rc != 0 and (not got or res.rc == 255):
            before = "" if got else res.stdout  # after frames, stdout is the finished steps' own
            conn.fail(cmds[len(got)], Result(res.rc, mask(before, secrets), mask(res.stderr, secrets)))
        raise HostError(conn.t.name, cmds[len(got)], res.rc, mask(res.stdout + res.stderr, secrets),
                        f"a sequence of {len(cmds)} commands stopped after {len(got)} without a "
                        "result for the next")
    return None
