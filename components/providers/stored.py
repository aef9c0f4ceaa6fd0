"""A local content-addressed store for rendered text the stack ships by hash (issue 16).

A file rendered once for the whole fleet (slurm.conf, gres.conf) and written to every node
would put its bytes in every node's state, inputs and outputs, so the state grows with the
square of the fleet. `File(..., by_hash=True)` instead writes the text here once, named by
its SHA-256, and gives every node's resource only that path and hash, like a `Payload`. The
program writes it on every run before the resource is registered, so the provider process
(same machine, same run) finds it when it writes a host; it refuses bytes that no longer hash
to what the program declared. Only non-secret text goes here: secrets stay inline, where the
engine encrypts them.

Where: $GPU_FLEET_STORE_DIR, else $XDG_CACHE_HOME/gpu-fleet/rendered (~/.cache/...), a 0700
directory of the user's own. Nothing reads it but this program and its provider; entries are
a few KB per distinct rendering and may be removed at any time between runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from ..errors import FleetError


def store_dir() -> Path:
    env = os.environ.get("GPU_FLEET_STORE_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpu-fleet" / "rendered"


def _private_dir() -> Path:
    d = store_dir()
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = d.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise FleetError(f"{d}: the rendered-file store must be a directory of this user's, not writable by "
                         f"others (owner uid {st.st_uid}, mode {oct(st.st_mode & 0o777)}); fix it or set "
                         f"GPU_FLEET_STORE_DIR")
    return d


def store_text(text: str) -> tuple[str, str]:
    """Put `text` in the store; (its path, its SHA-256). Idempotent; atomic (temp file + rename)."""
    data = text.encode()
    sha = hashlib.sha256(data).hexdigest()
    d = _private_dir()
    path = d / sha
    try:
        if path.read_bytes() == data:
            return str(path), sha
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return str(path), sha
