"""This machine's processes, for tests that interrupt runs: who is alive, who started whom."""

from __future__ import annotations

import time
from pathlib import Path


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command line) of every live process (a zombie is not live)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        if rest[0] not in ("Z", "X"):
            out[int(d.name)] = (int(rest[1]), cmd)
    return out


def providers_of(pid: int) -> list[int]:
    """A run's dynamic provider processes (`python -u -m components.provider_host`, or the SDK's
    `-m pulumi.dynamic` in a project without it; children of pulumi)."""
    return [p for p, (ppid, cmd) in processes().items()
            if ppid == pid and ("pulumi.dynamic" in cmd or "components.provider_host" in cmd)]


def wait_for(pred, timeout: float, what: str, step: float = 0.1) -> float:
    """Seconds until pred() holds; an AssertionError naming `what` after timeout."""
    start = time.monotonic()
    while not pred():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(step)
    return time.monotonic() - start
