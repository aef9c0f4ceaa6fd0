"""The small helpers every layer and primitive shares, defined once: a content hash, the argv
that runs a host script, a connected `Connection` from a resource's `conn` input, and the
options that parent a resource to its component and order it after others.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Optional, TypeVar

import pulumi

from .transport.command import Piece
from .transport.ssh import Connection, SshTarget, connection


def sha256(text: str, n: Optional[int] = None) -> str:
    """Hex SHA-256 of `text`, cut to its first `n` digits when given: a restart trigger or a
    name recorded in state keeps the length it was recorded with."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    return digest[:n] if n else digest


#: an argv's pieces: all text (list[str], what a recorded command holds) or some of them secret
P = TypeVar("P", bound=Piece)


def sh(script: str, *args: P) -> list[str | P]:
    """argv for a POSIX sh script (dash on Debian); positional args arrive quoted as $1, $2, ..."""
    return ["sh", "-c", script, "sh", *args]


def bash(script: str, *args: P) -> list[str | P]:
    """argv for a script that says #!/bin/bash (arrays, pipefail): `sh -c` would run it in dash."""
    return ["bash", "-c", script, "bash", *args]


def connect(conn: dict) -> Connection:
    """The module-level cached connection to the host a `conn` input names, connected."""
    c = connection(SshTarget.from_dict(conn))
    c.connect()
    return c


def after_of(parent: pulumi.Resource) -> Callable[..., pulumi.ResourceOptions]:
    """`after(*deps)`: options that make a resource `parent`'s child, created after `deps`."""
    return lambda *deps: pulumi.ResourceOptions(parent=parent, depends_on=[*deps])
