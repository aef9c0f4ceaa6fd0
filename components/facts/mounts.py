"""The mount table as findmnt shows it (`fact_mount` in scripts/mounts.sh).

"Mounted" is what the kernel's table says, never that a directory exists: the seed's `/data`
was an empty folder on the root disk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Mount:
    target: str
    source: str
    fstype: str
    options: tuple[str, ...]
    #: findmnt's ID and MAJ:MIN ("412 0:52"). The kernel hands out the lowest free ID again, so
    #: the ID alone can repeat across an unmount and a mount; the device is what ganesha's
    #: handles carry. A store mounted again shows as another mount when either moves.
    mount_id: str = ""


_PAIR = re.compile(r'([A-Z][A-Z0-9_%:-]*)="([^"]*)"')
_HEX = re.compile(rb"\\x([0-9a-fA-F]{2})")


def _unhex(value: str) -> str:
    """findmnt -P escapes `"`, `\\` and unprintable bytes as \\xNN (of the UTF-8 bytes)."""
    raw = _HEX.sub(lambda m: bytes([int(m.group(1), 16)]), value.encode())
    return raw.decode("utf-8", "replace")


def parse_findmnt(text: str) -> list[Mount]:
    """`findmnt -n -P -o TARGET,SOURCE,FSTYPE,OPTIONS[,ID,MAJ:MIN]` (KEY="value" pairs, one mount a line)."""
    out = []
    for line in text.splitlines():
        pairs = {k: _unhex(v) for k, v in _PAIR.findall(line)}
        if "TARGET" not in pairs:
            continue  # an error line ("findmnt: ...") or nothing
        opts = tuple(o for o in pairs.get("OPTIONS", "").split(",") if o)
        ident = " ".join(v for v in (pairs.get("ID"), pairs.get("MAJ:MIN")) if v)
        out.append(Mount(pairs["TARGET"], pairs.get("SOURCE", ""), pairs.get("FSTYPE", ""), opts, ident))
    return out
