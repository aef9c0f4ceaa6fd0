"""Slurm's live objects as `scontrol show <entity> -o` prints them: one object a line."""

from __future__ import annotations

import re

#: where a field starts: a name (letters, digits, `_`) and `=`, at the line's start or after
#: white space. Values hold `=` themselves (CfgTRES=cpu=80,gres/gpu=8) and white space (OS=Linux
#: 6.1.0 #1 SMP, Reason=... [root@...]); a value with " Word=" inside it would be split there.
_FIELD = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")


def parse_show_oneliner(text: str) -> list[dict[str, str]]:
    """`scontrol [-d] show node|partition|job ... -o` -> one {field: value} per object, in the
    order printed; a line that does not open with a field (an error: `Node x not found`) is
    skipped."""
    out = []
    for line in text.splitlines():
        starts = list(_FIELD.finditer(line))
        if not starts or starts[0].start() != 0:
            continue
        fields = {}
        for m, nxt in zip(starts, [*starts[1:], None]):
            fields[m.group(1)] = line[m.end():nxt.start() if nxt else len(line)].strip()
        out.append(fields)
    return out
