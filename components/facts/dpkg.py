"""Installed packages as dpkg's status database has them (`fact_dpkg_status` in scripts/dpkg.sh)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DpkgStatus:
    #: name -> version of each package installed: configured, or installed with triggers awaited
    #: or pending (an interrupted dpkg run leaves libc-bin's ldconfig trigger so)
    installed: dict[str, str] = field(default_factory=dict)
    #: names whose selection is hold (status h.), as `apt-mark hold` sets it
    held: set[str] = field(default_factory=set)


def parse_dpkg_status(text: str) -> DpkgStatus:
    """`dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'` -> installed and held.
    Half-installed states (U, F) count as absent; an architecture suffix (`libc6:amd64`) is
    dropped."""
    installed: dict[str, str] = {}
    held: set[str] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        name = parts[0].split(":")[0]
        # installed: configured (i), or installed with triggers awaited (W) or pending (t),
        # as an interrupted dpkg run leaves libc-bin's ldconfig trigger: counted as absent,
        # the next install that runs the trigger would record libc-bin as one it added
        if parts[2][:1] in ("i", "h") and parts[2][1:2] in ("i", "W", "t"):
            installed[name] = parts[1]
        if parts[2][:1] == "h":
            held.add(name)
    return DpkgStatus(installed, held)
