"""A small, forgiving parser for slurm.conf, cgroup.conf and gres.conf text.

Slurm's format: `Key=Value` pairs separated by blanks, `#` starts a comment, keys are
case-insensitive, the last global setting wins. Lines that start with an entity key
(NodeName=, PartitionName=, NodeSet=, DownNodes=, FrontendName=, SwitchName=) describe one
entity; everything else sets global parameters. `Include` lines are recorded, not followed
(a policy sees one File's content only).

`parse` remembers its last texts: every node carries the same slurm.conf, whose node lines
grow with the fleet, and five policies read it on each node; parsed each time, a no-op `up` of
1,250 nodes spent 248 CPU-s in the pack (bench/README.md). A parsed file is shared: read it,
never change it.
"""

from __future__ import annotations

import functools
import posixpath
import re
from dataclasses import dataclass, field
from typing import Optional

ENTITY_KEYS = ("nodename", "partitionname", "nodeset", "downnodes", "frontendname", "switchname")
_TOKEN = re.compile(r'(\S+?)=("[^"]*"|\S*)|(\S+)')


@dataclass
class SlurmConf:
    params: dict[str, str] = field(default_factory=dict)      # lower-case key -> last value
    entities: list[dict[str, str]] = field(default_factory=list)  # lower-case keys
    includes: list[str] = field(default_factory=list)
    lines: list[list[tuple[str, str]]] = field(default_factory=list)  # every line's pairs

    def get(self, key: str) -> Optional[str]:
        return self.params.get(key.lower())

    def nodes(self) -> list[dict[str, str]]:
        return [e for e in self.entities if "nodename" in e]


@functools.lru_cache(maxsize=16)
def parse(text: str) -> SlurmConf:
    """The file's parameters, entities, includes and lines (shared between callers: read only)."""
    conf = SlurmConf()
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.lower().startswith("include ") or line.lower().startswith("include\t"):
            conf.includes.append(line.split(None, 1)[1].strip())
            continue
        pairs: list[tuple[str, str]] = []
        for m in _TOKEN.finditer(line):
            if m.group(1) is None:
                continue
            value = m.group(2)
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            pairs.append((m.group(1).lower(), value))
        if not pairs:
            continue
        conf.lines.append(pairs)
        if pairs[0][0] in ENTITY_KEYS:
            conf.entities.append({k: v for k, v in pairs})
        else:
            for k, v in pairs:
                conf.params[k] = v
    return conf


def is_yes(value: Optional[str]) -> bool:
    return value is not None and value.strip().lower() in ("yes", "true", "1")


def basename(path: Optional[str]) -> str:
    return posixpath.basename(path or "")


def split_list(value: Optional[str]) -> list[str]:
    """A comma list, ignoring blanks; a `(...)` suffix (socket binding) stays with its item."""
    if not value:
        return []
    out, depth, cur = [], 0, ""
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [x for x in out if x]


@dataclass(frozen=True)
class Gres:
    name: str
    type: Optional[str]
    count: Optional[str]
    text: str


def parse_gres(item: str) -> Gres:
    """`gpu:v100:8(S:0-1)` -> Gres('gpu', 'v100', '8'); `gpu:8` -> untyped; `gpu:v100` -> count 1."""
    core = re.sub(r"\(.*\)$", "", item.strip())
    parts = core.split(":")
    name = parts[0].strip().lower()
    count_re = re.compile(r"^\d+[KMGTP]?$", re.I)
    if len(parts) == 1:
        return Gres(name, None, None, item)
    if len(parts) == 2:
        if count_re.match(parts[1]):
            return Gres(name, None, parts[1], item)
        return Gres(name, parts[1] or None, None, item)
    return Gres(name, parts[1] or None, parts[2] or None, item)
