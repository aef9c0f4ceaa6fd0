"""A refresh reads each host once: every probe the last refresh sent it, in one round trip.

The engine refreshes in dependency order: a node's Slurm layer is seven levels deep (accounts,
apt source, packages, key, munge, config files, slurmd), so even with batch.py each level was
its own round trip, and every level waited for the slowest host of the one before. Here the
provider process remembers, per host, the probe command lines its refresh reads sent
(`$GPU_FLEET_PROBE_DIR/<host key>.json`, default ~/.cache/gpu-fleet/probes; command lines
only, no output, and never one with a secret: batch.batchable). The first refresh read for a
host sends all of them at once (plus its own); the reads after it take their answer from that
reading of the host.

What keeps this honest: only refresh reads (`HostPrimitive.read`) use it, never the probe
before or after an apply, nor a delete; an answer is used once, only for the same command
line, and only within MAX_AGE_S; any mutating command to the host drops what is held. A
refresh changes nothing on a host, so reading it at one moment is what reading it over the
few seconds of a refresh would see. A remembered line that no resource asks for any more
(its resource removed, its inputs changed) costs one unused read once, and is forgotten.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Optional

from .target import Result, SshTarget

PROBE_DIR_ENV = "GPU_FLEET_PROBE_DIR"
#: how long a reading of a host answers the refresh reads after it
MAX_AGE_S = 60.0


def probe_dir() -> Path:
    return Path(os.environ.get(PROBE_DIR_ENV) or Path.home() / ".cache" / "gpu-fleet" / "probes")


def _key(t: SshTarget) -> str:
    return hashlib.sha256(json.dumps([t.name, t.address, t.port, t.user]).encode()).hexdigest()[:24]


class HostReading:
    """One per connection: what the last refresh probed there, and the answers held now."""

    def __init__(self, target: SshTarget):
        self._path = probe_dir() / f"{_key(target)}.json"
        self._lock = threading.Lock()
        self._held: dict[str, Result] = {}
        self._at = 0.0
        self._taken = False  # a reading was taken (until a mutating command)
        self._asked: dict[str, Optional[str]] = {}  # line -> resource, this run's refresh reads
        self._previous: Optional[dict[str, Optional[str]]] = None  # the last run's, read once

    def remembered(self) -> dict[str, Optional[str]]:
        try:
            data = json.loads(self._path.read_text())
            return {p["line"]: p.get("for") for p in data.get("probes", []) if isinstance(p.get("line"), str)}
        except (OSError, ValueError, AttributeError, TypeError):
            return {}

    def _remember(self, line: str, label: Optional[str]) -> None:
        if self._asked.get(line, "") == label:
            return
        self._asked[line] = label
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = self._path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"probes": [{"line": k, "for": v} for k, v in self._asked.items()]}))
            tmp.replace(self._path)
        except OSError:
            pass  # a cache: without it a refresh only costs more round trips

    def answer(self, line: str, label: Optional[str], read_all) -> Optional[Result]:
        """The held answer for `line`, taking the host's reading first when none was taken;
        None when there is none (the caller probes as usual). `read_all(lines, labels)` runs
        the lines in one round trip and returns their results."""
        with self._lock:
            if self._previous is None:
                self._previous = self.remembered()
            self._remember(line, label)
            if self._held and time.monotonic() - self._at > MAX_AGE_S:
                self._held.clear()
            if line in self._held:
                return self._held.pop(line)
            if self._taken:
                # not in the reading, or already answered from it (two resources with one probe
                # command, a second refresh): probed as usual, alone. A second whole reading
                # would cost as much as the first for one line (30 s a host once, on the lab,
                # behind a mount whose server was gone).
                return None
            # the first refresh read since the host last changed
            self._taken, self._held = True, {}
            want = {**self._previous, **self._asked}
            if len(want) < 2:
                return None  # nothing remembered: nothing to gain
            lines = list(want)
            results = read_all(lines, [want[x] for x in lines])
            self._held = dict(zip(lines, results))
            self._at = time.monotonic()
            return self._held.pop(line)

    def forget(self) -> None:
        """A mutating command went to the host: what was read before may no longer hold."""
        with self._lock:
            self._held.clear()
            self._taken = False
