"""Before `make up`: a lock a dead run left, and operations a killed run left pending.

    python -m components.runlock <stack> [--cwd DIR] [--pulumi bin/pulumi]

The file backend keeps a stack's lock at `<backend>/.pulumi/locks/.../<stack>/<id>.json`
(pid, user, host, time). A lock whose process is alive on this machine means another run
is going: wait. A lock whose process is gone (kill -9, a crash, power loss) is reported with
the command that clears it (`pulumi cancel`), never cleared here: a lock from another
machine, or a process this machine cannot see, may still be a live run.

A run killed while applying leaves the operations it had started as `pending_operations`
in the state: the engine then does not know whether a create happened. With the lock
clear, this clears pending creates (`pulumi refresh --clear-pending-creates`), so the next
`up` creates them again; every provider's create probes the host first and converges from
what is there, so nothing the killed run did is done twice (a File it had already written
is then recorded as found on the host: destroy puts that content back rather than removing
it). Pending updates and deletes are only reported: a refresh reads them back from the hosts.

Exit codes: 0 ready for `up`, 1 a lock is held (printed: who, since when, what to do).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from .config.project import PROJECT


def backend_dir(env: dict) -> Optional[Path]:
    url = env.get("PULUMI_BACKEND_URL", "")
    return Path(url.removeprefix("file://")) if url.startswith("file://") else None


def locks(backend: Path, stack: str) -> list[dict]:
    """Every lock file of the stack, with its path."""
    root = backend / ".pulumi" / "locks"
    out = []
    for f in sorted(root.glob(f"**/{PROJECT}/{stack}/*.json")) if root.is_dir() else []:
        try:
            out.append({**json.loads(f.read_text()), "path": str(f)})
        except (OSError, ValueError):
            out.append({"path": str(f), "unreadable": True})
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def judge_lock(lock: dict, stack: str, here: str, is_alive=alive) -> str:
    """Pure: one lock -> the sentence an admin reads."""
    who = f"pid {lock.get('pid')} of {lock.get('username', '?')} on {lock.get('hostname', '?')}"
    since = lock.get("timestamp", "an unknown time")
    clear = (f"make sure no `pulumi` runs on stack {stack} anywhere, then clear it with "
             f"`bin/pulumi cancel --stack {stack} --yes`; then `make up STACK={stack}`")
    if lock.get("unreadable"):
        return f"stack {stack} has a lock file that cannot be read ({lock['path']}): {clear}"
    if lock.get("hostname") != here:
        return (f"stack {stack} is locked by {who} since {since}, on another machine (its process "
                f"cannot be checked from here): if that run is over, {clear}")
    if is_alive(int(lock.get("pid", 0))):
        return f"stack {stack} is being updated by {who} since {since}: wait for it to finish"
    return (f"stack {stack} is locked by {who} since {since}, and that process is gone (killed, "
            f"crashed or the machine restarted): {clear}")


def pending(state: dict) -> list[dict]:
    return list((state.get("deployment") or {}).get("pending_operations") or [])


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m components.runlock", description=__doc__.splitlines()[0])
    ap.add_argument("stack")
    ap.add_argument("--cwd", default=".")
    ap.add_argument("--pulumi", default="bin/pulumi")
    a = ap.parse_args(argv)
    backend = backend_dir(dict(os.environ))
    if backend is not None:
        held = locks(backend, a.stack)
        if held:
            for lock in held:
                print(f"runlock: {judge_lock(lock, a.stack, socket.gethostname())}", file=sys.stderr)
            return 1
    p = subprocess.run([a.pulumi, "stack", "export", "--stack", a.stack], cwd=a.cwd, capture_output=True,
                       text=True)
    if p.returncode != 0:
        return 0  # no stack yet (or no state): nothing can be pending
    ops = pending(json.loads(p.stdout or "{}"))
    if not ops:
        return 0
    stamp = datetime.now(timezone.utc).strftime("%H:%M:%S")
    for op in ops:
        print(f"runlock {stamp}: the last run left `{op.get('type')}` pending on "
              f"{(op.get('resource') or {}).get('urn')}", file=sys.stderr)
    if any(op.get("type") == "creating" for op in ops):
        print("runlock: clearing the pending creates (`pulumi refresh --clear-pending-creates`): the next "
              "up creates them again, converging from what the killed run left on the hosts", file=sys.stderr)
        r = subprocess.run([a.pulumi, "refresh", "--stack", a.stack, "--clear-pending-creates", "--yes",
                            "--skip-preview", "--non-interactive"], cwd=a.cwd)
        if r.returncode != 0:
            print(f"runlock: the refresh failed (exit {r.returncode}); see above", file=sys.stderr)
            return r.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
