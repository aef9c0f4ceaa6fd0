"""Payload: a file whose bytes come from a local artifact, recorded in the stack by SHA-256 only.

For what is too big or binary for a `File` input (a wheelhouse, a release tarball): the
stack's inputs and state hold the artifact's local path and its SHA-256, never its bytes,
so a 10 MB payload costs the state a few hundred bytes. The bytes are read when they are
written, and refused when the artifact is no longer what the program declared (it changed
between preview and up). Writing, modes, backups and delete are File's.

`bytecode=True`, for a Python module that a probe imports on every refresh (pynvml: 332 KB of
source, ~50 ms of CPU to compile each time on a lab node, half of the GPU probe): the apply
also compiles it on the host with the host's `python3`, as a checked-hash .pyc (Python checks
it against the source's hash at each import, so it is never used for other bytes), and the
probe reads that it is there. A probe stays read-only (`PYTHONDONTWRITEBYTECODE=1`): the
bytecode is written by the apply, as managed state, and removed with the file by delete.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

import pulumi
from pulumi.dynamic import Resource

from ..kit import sh
from .parts import Observed, Props, Step
from .file import FileProvider

#: compiles argv[1] into its __pycache__ (importlib's path for this python3), checked by hash
COMPILE = ("import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True, "
           "invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)")


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

    def probe_argv(self, props: Props) -> list:
        argv = super().probe_argv(props)
        return [*argv, "pyc"] if props.get("bytecode") else argv

    def desired(self, props: Props) -> dict:
        want = super().desired(props)
        return {**want, "bytecode": True} if props.get("bytecode") else want

    def state(self, props: Props, obs: Observed) -> dict:
        have = super().state(props, obs)
        if not props.get("bytecode"):
            return have
        # a host without python3 has nothing to compile with (and nothing to import it: the GPU
        # probe's own verdict says so), so it is not kept from converging by it
        return {**have, "bytecode": bool(obs.get("bytecode")) or obs.get("python3") is False}

    def plan(self, props: Props, obs: Observed, record: Props) -> list[Step]:
        steps = super().plan(props, obs, record)
        if props.get("bytecode") and obs.get("python3") is not False \
                and (self.needs_write(props, obs) or not obs.get("bytecode")):
            steps.append(Step(["python3", "-c", COMPILE, props["path"]], f"compile {props['path']}"))
        return steps

    def plan_delete(self, props: Props, obs: Observed) -> list[Step]:
        """The bytecode first, and its __pycache__ when that leaves it empty (so that File's
        delete can remove the directory it made for the module)."""
        gone = [Step(sh('rm -f -- "$@"; rmdir -- "${1%/*}" 2>/dev/null || true', *obs["bytecode"]),
                     f"remove the bytecode of {props['path']}")] if obs.get("bytecode") else []
        return gone + super().plan_delete(props, obs)


class Payload(Resource, module="host", name="Payload"):
    """A file on one host with the exact bytes of a local artifact (checked by SHA-256)."""

    sha256: pulumi.Output[str]
    present: pulumi.Output[bool]

    def __init__(self, name: str, *, conn: dict, path: str, source: Path, mode: str = "0644",
                 owner: str = "root", group: str = "root", bytecode: bool = False,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(
            PayloadProvider(), name,
            {"conn": conn, "path": path, "source": str(source), "source_sha256": sha256_file(source),
             "mode": mode, "owner": owner, "group": group, "validate": None, "secret": False,
             **({"bytecode": True} if bytecode else {}), "sha256": None, "present": None},
            opts,
        )
