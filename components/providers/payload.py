"""Payload: a file whose bytes come from a local artifact, recorded in the stack by SHA-256 only.

For what is too big or binary for a `File` input (a wheelhouse, a release tarball): the
stack's inputs and state hold the artifact's local path and its SHA-256, never its bytes,
so a 10 MB payload costs the state a few hundred bytes. The bytes are read when they are
written, and refused when the artifact is no longer what the program declared (it changed
between preview and up). Writing, modes, backups and delete are File's.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

import pulumi
from pulumi.dynamic import Resource

from .base import Props
from .file import FileProvider


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class PayloadProvider(FileProvider):
    """File's, by hash: `source` and `source_sha256` (FileProvider.digest and .content)."""

    def public_inputs(self, props: Props) -> Props:
        return dict(props)


class Payload(Resource, module="host", name="Payload"):
    """A file on one host with the exact bytes of a local artifact (checked by SHA-256)."""

    sha256: pulumi.Output[str]
    present: pulumi.Output[bool]

    def __init__(self, name: str, *, conn: dict, path: str, source: Path, mode: str = "0644",
                 owner: str = "root", group: str = "root",
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(
            PayloadProvider(), name,
            {"conn": conn, "path": path, "source": str(source), "source_sha256": sha256_file(source),
             "mode": mode, "owner": owner, "group": group, "validate": None, "secret": False,
             "sha256": None, "present": None},
            opts,
        )
