"""Read-only probes for one host that arrive together share one SSH round trip (issue 16).

A refresh reads every resource at once, up to the engine's `--parallel`: a node's layer is a
handful of resources, each with its own probe. The first probe for a host opens a batch and
waits `WINDOW_S` for others; then one command (scripts/batch.sh) runs every member on the
host side by side and returns each one's exit code, stdout and stderr, framed by byte counts,
and each caller gets exactly the result its own command would have had. A probe that arrives
alone runs as it always did. Only read-only commands without stdin or secrets join a batch
(a secret would be in the batch's logged command line); mutating commands never do.

If the batch itself fails (the host unreachable, the run stopped, output without its
frames), every member gets that failure, as it would have running alone.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Optional, Protocol, Sequence

from ..scripts import script
from . import frames
from .command import Piece, Secret, shell_join
from .target import HostError, Result, SshTarget, acting_label

_SCRIPT = script(__file__, "batch.sh")
#: how long the first probe waits for others to the same host, and again while they keep
#: coming (the provider's threads reach their probes over tens of ms), up to MAX_WAIT_S
WINDOW_S = 0.015
MAX_WAIT_S = 0.1
#: members a batch: the engine has at most --parallel calls in flight anyway
MAX_MEMBERS = 32
#: command-line bytes a batch (one string to the remote shell: Linux caps one at 128 KiB)
MAX_BYTES = 64 * 1024
_FRAME = b"== gf-batch "


def batchable(argv: Sequence[Piece]) -> bool:
    return not any(isinstance(p, Secret) for p in argv)


def _full(members: int, size: int, line: str) -> bool:
    """A batch of `members` lines, `size` bytes, has no room for `line` (the caps above)."""
    return members >= MAX_MEMBERS or size + len(line) > MAX_BYTES


@dataclass
class _Member:
    argv: list[Piece]
    line: str
    timeout: int
    sent_for: Optional[str]  # the resource it probes, for the command log
    result: Optional[Result] = None
    error: Optional[BaseException] = None


@dataclass
class _Batch:
    members: list[_Member] = field(default_factory=list)
    size: int = 0
    done: threading.Event = field(default_factory=threading.Event)


def split_frames(out: bytes, n: int) -> list[tuple[int, bytes, bytes]]:
    """batch.sh's stdout -> (exit code, stdout, stderr) for members 1..n; ValueError when a
    frame is missing or short (the batch was cut off)."""
    return frames.split(out, _FRAME, n)


class _Runs(Protocol):
    """What a Batcher needs of its connection (an ssh.Connection, which builds on this module)."""

    t: SshTarget

    def run(self, argv: Sequence[Piece], *, mutating: bool, sudo: bool = ..., check: bool = ...,
            timeout: int = ..., _errors: str = ..., _for: Optional[list] = ...) -> Result: ...


class Batcher:
    """One per connection: gathers that host's concurrent probes."""

    def __init__(self, conn: _Runs):
        self._conn = conn
        self._lock = threading.Lock()
        self._open: Optional[_Batch] = None

    def run(self, argv: list[Piece], timeout: int) -> Result:
        m = _Member(argv, shell_join(argv), timeout, acting_label())
        with self._lock:
            b = self._open
            lead = b is None or _full(len(b.members), b.size, m.line)
            if b is None or lead:
                b = self._open = _Batch()
            b.members.append(m)
            b.size += len(m.line) + 3
        if lead:
            deadline, seen = time.monotonic() + MAX_WAIT_S, 0
            while len(b.members) > seen and time.monotonic() < deadline:
                seen = len(b.members)
                time.sleep(WINDOW_S)
            with self._lock:
                if self._open is b:
                    self._open = None
            try:
                self._send(b.members)
            finally:
                b.done.set()
        else:
            b.done.wait()
        if m.error is not None:
            raise m.error
        assert m.result is not None
        return m.result

    def run_many(self, lines: list[str], labels: list[Optional[str]], timeout: int) -> list[Result]:
        """Command lines (already joined, sudo included) now, as few round trips as the caps
        allow; their results in order. The first failure of a round trip is raised."""
        members = [_Member([], line, timeout, label) for line, label in zip(lines, labels)]
        chunk: list[_Member] = []
        size = 0
        for m in members:
            if chunk and _full(len(chunk), size, m.line):
                self._send(chunk)
                chunk, size = [], 0
            chunk.append(m)
            size += len(m.line) + 3
        if chunk:
            self._send(chunk)
        for m in members:
            if m.error is not None:
                raise m.error
        return [m.result for m in members]  # type: ignore[misc]

    def _send(self, members: list[_Member]) -> None:
        c = self._conn
        if len(members) == 1 and members[0].argv:
            m = members[0]
            try:
                m.result = c.run(m.argv, mutating=False, sudo=False, check=False, timeout=m.timeout,
                                 _for=[m.sent_for] if m.sent_for else [])
            except BaseException as e:  # handed to the caller, raised there
                m.error = e
            return
        argv = ["sh", "-c", _SCRIPT, "gf-batch", *(m.line for m in members)]
        try:
            res = c.run(argv, mutating=False, sudo=False, check=False,
                        timeout=max(m.timeout for m in members), _errors="surrogateescape",
                        _for=[m.sent_for for m in members if m.sent_for])
            raw = res.stdout.encode(errors="surrogateescape")
            if res.rc == 255:  # ssh's own failure: each member's command would have met it
                for m in members:
                    m.result = Result(255, "", res.stderr)
                return
            frames = split_frames(raw, len(members))
        except ValueError as e:
            err = HostError(c.t.name, f"a batch of {len(members)} probes", res.rc,
                            res.stdout + res.stderr, f"its output was cut off ({e})")
            for m in members:
                m.error = err
            return
        except BaseException as e:
            for m in members:
                m.error = e
            return
        for m, (rc, out, stderr) in zip(members, frames):
            m.result = Result(rc, out.decode(errors="replace"), stderr.decode(errors="replace"))
