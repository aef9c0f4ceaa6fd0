"""A unit as the running manager sees it: `systemctl show` (the unit probe,
components/providers/scripts/systemd_probe.sh, sends it with the properties it needs)."""

from __future__ import annotations


def parse_show(text: str) -> dict[str, str]:
    """`systemctl show -p A -p B ...` -> {property: value}; a line without `=` is skipped. What
    counts is this, not the unit file: a file saying `Delegate=yes` the manager has not loaded
    shows the old value here."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out
