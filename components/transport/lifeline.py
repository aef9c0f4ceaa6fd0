"""The provider process's lifeline: when the run stops, the commands on the hosts stop too.

The engine serves every dynamic resource from one process, `python -u -m pulumi.dynamic`.
Two ways a run ends under it:

- **Cancel** (Ctrl-C or SIGTERM to `pulumi`): the engine sends the gRPC `Cancel` to every
  provider and waits for the operations in flight. The SDK's `Cancel` is a no-op, so a
  provider in the middle of an `apt-get install` went on for a minute. `install_cancel` makes
  it stop: no new mutating command starts, and the ssh processes in flight are terminated,
  so the operations fail within seconds and the engine records that.
- **The engine dies** (`kill -9` of `pulumi`, a crash): nothing tells the provider; it used to
  go on changing hosts with nobody recording it. `watch` polls the process's ancestry (its
  parent, and the parent of a shell shim that did not `exec`); when it changes, the same stop
  happens, then the process exits after a short grace.

Every host command the transport runs is a `subprocess.Popen` from `spawn`, so it can be
stopped from another thread (`subprocess.run` cannot). Stopping a command terminates its ssh
process and that process's children (SIGTERM, then SIGKILL after a second); the provider
process's own process group is left alone, so the engine's kill of that group still reaches
every ssh process in it.

What this cannot do: a remote command whose ssh client is gone is not always killed on the
host (sshd closes its pipes; a command that writes then gets SIGPIPE, one that does not runs
to its end). Nothing new starts after it, and the next `pulumi up` probes the host first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Callable, NamedTuple, Optional, Sequence

PROVIDER_MAIN = "pulumi.dynamic.__main__"

CANCELLED = ("the run was cancelled (Ctrl-C or SIGTERM to pulumi: the engine sent Cancel); "
             "`pulumi up` again finishes it")
ENGINE_GONE = ("the Pulumi engine that started this provider is gone (pulumi was killed or crashed); "
               "gpu-fleet starts no host change that nobody would record")

POLL_S = 0.5  # how often the watchdog looks at the process's ancestry
GRACE_S = 2.0  # from the engine's death to this process's exit
KILL_AFTER_S = 1.0  # from SIGTERM to SIGKILL of a stopped command

_SHELLS = frozenset({"sh", "dash", "bash", "ash", "busybox"})


class Refused(Exception):
    """A mutating command was not started: the run is stopping (the reason is the message)."""


_lock = threading.Lock()
_inflight: dict[subprocess.Popen, Optional[str]] = {}  # command -> why we stopped it (None: running)
_stopped: Optional[str] = None  # why no mutating command starts any more
_watcher: Optional[threading.Thread] = None


def stopped() -> Optional[str]:
    """Why new mutating commands are refused, or None while the run goes on."""
    return _stopped


def spawn(argv: Sequence[str], *, mutating: bool) -> subprocess.Popen:
    """Start a host command (stdin, stdout and stderr piped) that `stop` can end. A mutating one
    is refused (`Refused`) once the run is stopping; a read-only one still starts."""
    with _lock:  # a command is either refused or registered before stop() looks
        if mutating and _stopped is not None:
            raise Refused(_stopped)
        p = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        _inflight[p] = None
    return p


def done(p: subprocess.Popen) -> Optional[str]:
    """Forget a finished command; returns why `stop` ended it, or None if it ended by itself."""
    with _lock:
        return _inflight.pop(p, None)


def stop(reason: str) -> int:
    """Refuse every new mutating command from now on and end the commands in flight.
    Returns how many were ended. The engine's death overrides a cancel as the reason."""
    global _stopped
    with _lock:
        if _stopped is None or reason == ENGINE_GONE:
            _stopped = reason
        victims = [p for p, why in _inflight.items() if why is None]
        for p in victims:
            _inflight[p] = reason
    for p in victims:
        kill(p)
    return len(victims)


class _Proc(NamedTuple):
    comm: str
    state: str
    ppid: int
    start: int  # clock ticks after boot: tells a reused pid apart


def _proc(pid: int) -> Optional[_Proc]:
    """/proc/<pid>/stat, or None when the process is gone (a zombie is gone)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = data[data.index("(") + 1:data.rindex(")")]
    rest = data[data.rindex(")") + 2:].split()
    if rest[0] in ("Z", "X"):
        return None
    return _Proc(comm, rest[0], int(rest[1]), int(rest[19]))


def _descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start) of every live descendant of pid, children first."""
    children: dict[int, list[tuple[int, int]]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if name.isdigit():
            st = _proc(int(name))
            if st is not None:
                children.setdefault(st.ppid, []).append((int(name), st.start))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def _signal(pid: int, start: Optional[int], sig: int) -> None:
    if start is not None:
        st = _proc(pid)
        if st is None or st.start != start:
            return  # gone, or the pid is another process's now
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill(p: subprocess.Popen, after_s: float = KILL_AFTER_S) -> None:
    """End a command: SIGTERM to its ssh process and that process's children, SIGKILL to
    whatever is left after `after_s` (0: SIGKILL at once)."""
    if p.returncode is not None:
        return
    tree = [(p.pid, None), *_descendants(p.pid)]
    if after_s <= 0:
        for pid, start in tree:
            _signal(pid, start, signal.SIGKILL)
        return
    for pid, start in tree:
        _signal(pid, start, signal.SIGTERM)

    def finish() -> None:
        time.sleep(after_s)
        for pid, start in tree:
            if pid == p.pid and p.returncode is not None:
                continue  # reaped by its caller: the pid may be another process's now
            _signal(pid, start, signal.SIGKILL)

    threading.Thread(target=finish, name="gpu-fleet-kill", daemon=True).start()


# ---- the engine's death -------------------------------------------------------------------

def ancestry() -> list[tuple[int, _Proc]]:
    """The parent this process depends on, and, while that is a shell (a plugin shim that did
    not `exec`), the shell's parent too: the engine is the first ancestor that is not a shell."""
    chain: list[tuple[int, _Proc]] = []
    pid = os.getppid()
    while pid > 1 and len(chain) < 4:
        st = _proc(pid)
        if st is None:
            break
        chain.append((pid, st))
        if st.comm not in _SHELLS:
            break
        pid = st.ppid
    return chain


def engine_gone(parent: int, chain: list[tuple[int, _Proc]]) -> bool:
    """Whether the ancestry recorded at start has changed: our parent is another (init or a
    subreaper adopted us), a recorded ancestor is gone, or a shim shell between us and the
    engine was adopted (its parent, the engine, died). The engine's own parent may die (a
    `nohup pulumi up` whose terminal closed): the engine is still there, and so are we."""
    if os.getppid() != parent:
        return True
    for pid, was in chain:
        now = _proc(pid)
        if now is None or now.start != was.start:
            return True
        if was.comm in _SHELLS and now.ppid != was.ppid:
            return True
    return False


def watch(*, poll_s: float = POLL_S, grace_s: float = GRACE_S,
          exit_fn: Callable[[int], None] = os._exit) -> bool:
    """Start, once per process, the watchdog: within `poll_s` of the engine's death it stops
    the run (`stop(ENGINE_GONE)`), and `grace_s` later it exits the process. Returns whether
    a watchdog runs (not when this process's parent is already init: nothing to watch)."""
    global _watcher
    with _lock:
        if _watcher is not None:
            return True
        parent = os.getppid()
        if parent <= 1:
            return False
        chain = ancestry()

        def loop() -> None:
            while not engine_gone(parent, chain):
                time.sleep(poll_s)
            stop(ENGINE_GONE)
            time.sleep(grace_s)
            exit_fn(1)  # no one reads this process's output any more; nothing to say

        _watcher = threading.Thread(target=loop, name="gpu-fleet-engine-watch", daemon=True)
        _watcher.start()
        return True


# ---- the engine's Cancel ------------------------------------------------------------------

_HOOK = "_gpu_fleet_cancel"


def _cancel(self, request, context):
    """The SDK servicer's `Cancel`, once hooked. It runs as the SDK's own function, with the
    SDK __main__'s globals: `empty_pb2` is the SDK's import, `_gpu_fleet_cancel` ours."""
    try:
        _gpu_fleet_cancel()  # noqa: F821 - a global of the SDK's __main__, set by install_cancel
    except Exception:  # Cancel is advisory; never fail the engine's call
        pass
    return empty_pb2.Empty()  # noqa: F821 - the SDK __main__'s import


def on_cancel() -> None:
    stop(CANCELLED)


def install_cancel(main: ModuleType) -> bool:
    """Make the SDK's `DynamicResourceProviderServicer.Cancel` stop the run.

    The one monkeypatch of the SDK, and why it swaps the function's code: the gRPC server
    took `servicer.Cancel` as a bound method when the SDK's main() registered the servicer,
    before any of our modules was imported, so replacing the class attribute would never be
    called. The function object the bound method holds is the SDK's; giving it our code
    (no closure, the same signature) is the only way in without restarting the server.
    Returns whether it is hooked; False (and nothing changed) if the SDK's shape differs."""
    servicer = getattr(main, "DynamicResourceProviderServicer", None)
    fn = getattr(servicer, "Cancel", None)
    code = getattr(fn, "__code__", None)
    if fn is None or code is None or code.co_freevars or code.co_argcount != 3 or not hasattr(main, "empty_pb2"):
        return False
    setattr(main, _HOOK, on_cancel)
    fn.__code__ = _cancel.__code__
    return True


def install(main: Optional[ModuleType] = None) -> bool:
    """In the engine's provider process (its `__main__` is the SDK's): hook Cancel and start
    the watchdog. A no-op anywhere else (tests, `python -m lab`, the program). Returns
    whether it ran."""
    main = main if main is not None else sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if main is None or spec is None or spec.name != PROVIDER_MAIN:
        return False
    install_cancel(main)
    watch()
    return True


def _reset_for_tests() -> None:
    """Forget a stop (unit tests run many "runs" in one process)."""
    global _stopped
    with _lock:
        _stopped = None
        _inflight.clear()
