"""Slurm's accounting database as sacctmgr lists it: `sacctmgr --noheader --parsable2 show`.

The argv asks for the fields by name (`format=`), so the parser reads them by position:
parsable2 prints them `|`-separated with no trailing `|`, no header and no truncation.
"""

from __future__ import annotations

from typing import Sequence


def show_argv(entity: str, fields: Sequence[str], **where: str) -> list[str]:
    """`sacctmgr --noheader --parsable2 show <entity> [where k=v ...] format=<fields>`."""
    conds = [f"{k}={v}" for k, v in where.items()]
    return ["sacctmgr", "--noheader", "--parsable2", "show", entity,
            *(["where", *conds] if conds else []), "format=" + ",".join(fields)]


def parse_parsable2(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """What `show_argv(entity, fields)` printed -> one {field: value} a row. A line with another
    number of values (a warning on the same stream, or a value holding `|`) is skipped."""
    out = []
    for line in text.splitlines():
        values = line.split("|")
        if len(values) == len(fields):
            out.append(dict(zip(fields, values)))
    return out
