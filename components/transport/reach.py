"""The hosts found unreachable on connect in this provider process (one `pulumi` run), kept by
how they are reached (address, port, jump host): every later connect or command to one fails
at once (`HostRemembered`), so N resources on a dead host cost one connect timeout, not N.
Apart from ssh.py so this memory, its locks and how a run forgets it read as one thing."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Optional

from .target import SshTarget


def _where(t: SshTarget) -> str:
    return f"{t.address}:{t.port}" + (f" via {t.proxy_jump}" if t.proxy_jump else "")


@dataclass(frozen=True)
class _Unreachable:
    where: str
    first_at: float  # time.time() of the first failed connect


# Hosts found unreachable on connect in this provider process, by how they are reached.
_unreachable: dict[tuple, _Unreachable] = {}
_reach_locks: dict[tuple, threading.Lock] = {}
_reach_lock = threading.Lock()


def _reach_key(t: SshTarget) -> tuple:
    """What reachability depends on: another user or key reaches the same host, or not."""
    return (t.address, t.port, t.proxy_jump)


def reach_lock_of(t: SshTarget) -> threading.Lock:
    """One connect attempt at a time per address (across targets): the callers that wait for
    a failing one then fail at once instead of timing out again."""
    with _reach_lock:
        return _reach_locks.setdefault(_reach_key(t), threading.Lock())


def remembered(t: SshTarget) -> Optional[_Unreachable]:
    with _reach_lock:
        return _unreachable.get(_reach_key(t))


def remember(t: SshTarget) -> None:
    with _reach_lock:
        _unreachable.setdefault(_reach_key(t), _Unreachable(_where(t), time.time()))


def forget_unreachable() -> None:
    """Forget every remembered host (a new run; unit tests)."""
    with _reach_lock:
        _unreachable.clear()
