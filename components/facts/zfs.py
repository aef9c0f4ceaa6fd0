"""ZFS as its tools print it (`fact_zfs_get`, `fact_zpool_health` in scripts/zfs.sh).

The probes merge stderr into stdout, so each parser skips lines that are not its tool's
output; what a missing line means is the caller's to say.
"""

from __future__ import annotations


def parse_zfs_get(text: str) -> dict[str, dict[str, tuple[str, str]]]:
    """`zfs get -H -p -o name,property,value,source <props> <datasets>` -> {dataset: {prop:
    (value, source)}}. The source matters: zfs-fuse prints `readonly off temporary` for a
    dataset mounted read-write even while `readonly=on` is set locally."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 4 or not fields[0] or not fields[1]:
            continue  # an error line (stderr), not zfs's tab-separated output
        name, prop, value, source = fields
        out.setdefault(name, {})[prop] = (value, source)
    return out


def parse_zpool_list(text: str) -> dict[str, str]:
    """`zpool list -H -o name,health` -> {pool: health}; error lines (`cannot open 'ai': no such
    pool`) are skipped."""
    out = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 2 and fields[0] and fields[1].strip():
            out[fields[0]] = fields[1].strip()
    return out
