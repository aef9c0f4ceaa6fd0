"""What a primitive found on its host before it first changed anything there, kept on the host.

A create records what it found (`HostPrimitive.remember`: the original file it backed up, a
user it made, a unit that was stopped, the packages an install added) so that delete puts
the host back. The engine keeps that record in the stack's state, which a run saves at its
end when it skips per-step checkpoints (PULUMI_SKIP_CHECKPOINTS, how a large fleet's `up`
stays linear: bench/README.md). A run killed before that end has changed hosts the state does
not know of; the next create would find its own work there and record it as the host's
original, and a rollback would keep it. So the record also goes to the host, in the same
round trip as the first change, and a create reads it back with its probe: a record found
there is the host as it was before the first run touched it. Delete removes it last.

The record lives at `KEPT_DIR/<kind>/<sha256 of the object's key>.json`, root-only
(GPU_FLEET_KEPT_DIR moves it: tests whose "hosts" are this machine keep it under their tmp).
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

from ..kit import sh, sha256
from ..scripts import script
from ..transport.command import Piece
from .parts import Props, Step

KEPT_DIR = "/var/lib/gpu-fleet/kept"
_PROBE = script(__file__, "kept_probe.sh")
_WRITE = script(__file__, "kept_write.sh")
_REMOVE = script(__file__, "kept_remove.sh")
_FRAME = "\n== gf-kept ==\n"


def path_of(kind: str, key: str) -> str:
    return f"{os.environ.get('GPU_FLEET_KEPT_DIR') or KEPT_DIR}/{kind}/{sha256(key)}.json"


def probe_argv(path: str, argv: Sequence[Piece]) -> list[Piece]:
    """`argv` (a probe) and then the record at `path`, in one command."""
    return sh(_PROBE, path, *argv)


def split(stdout: str) -> tuple[str, Optional[Props], bool]:
    """The probe's own output; the record kept (None: none, or none this could read); and
    whether a file is there (to remove on delete, readable or not)."""
    own, frame, kept = stdout.rpartition(_FRAME)
    if not frame:
        return stdout, None, False
    try:
        doc = json.loads(kept) if kept.strip() else None
    except ValueError:
        doc = None  # not one kept_write.sh wrote whole: it renames a complete file into place
    record = doc.get("record") if isinstance(doc, dict) else None
    return own, record if isinstance(record, dict) else None, bool(kept)


def write_step(path: str, kind: str, key: str, record: Props) -> Step:
    doc = {"kind": kind, "key": key, "record": record}
    return Step(sh(_WRITE, path), f"keep what {key} was before this change",
                stdin=(json.dumps(doc, sort_keys=True) + "\n").encode())


def remove_step(path: str) -> Step:
    return Step(sh(_REMOVE, path), "forget what it was before")
