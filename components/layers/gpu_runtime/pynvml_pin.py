"""The project's pinned NVML bindings: the single-file `pynvml.py` of nvidia-ml-py in the
project's virtualenv, checked against its wheel's RECORD, which the layer ships to every GPU
node. Apart from component.py: it reads this machine's virtualenv, not a host."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Optional

from ...errors import FleetError

PYNVML_DIST = "nvidia-ml-py"
DEFAULT_PYNVML_DIR = "/opt/gpu-fleet/lib"


@dataclass(frozen=True)
class PinnedPynvml:
    version: str
    source: str
    sha256: str
    #: the file in the project's virtualenv (what the nodes' Payload ships)
    path: Path


def _record_sha256(dist: metadata.Distribution, name: str) -> Optional[str]:
    """The hex SHA-256 the wheel's RECORD lists for `name` (None: not listed)."""
    record = dist.read_text("RECORD") or ""
    for row in csv.reader(io.StringIO(record)):
        if row and row[0] == name and len(row) > 1 and row[1].startswith("sha256="):
            digest = row[1].split("=", 1)[1]
            return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    return None


def pinned_pynvml() -> PinnedPynvml:
    """The single-file `pynvml.py` of the project's pinned nvidia-ml-py, checked against its RECORD."""
    try:
        dist = metadata.distribution(PYNVML_DIST)
    except metadata.PackageNotFoundError:
        raise FleetError(f"{PYNVML_DIST} is not installed in the project's virtualenv "
                         "(it is pinned in requirements.txt; run `make setup`)") from None
    path = Path(str(dist.locate_file("pynvml.py")))
    try:
        data = path.read_bytes()
    except OSError as e:
        raise FleetError(f"cannot read {path} of {PYNVML_DIST} {dist.version}: {e}") from None
    sha = hashlib.sha256(data).hexdigest()
    recorded = _record_sha256(dist, "pynvml.py")
    if recorded is not None and recorded != sha:
        raise FleetError(f"{path} does not match the RECORD of {PYNVML_DIST} {dist.version} "
                         f"(sha256 {sha}, recorded {recorded}); reinstall it (`make setup`)")
    return PinnedPynvml(version=dist.version, source=data.decode("utf-8"), sha256=sha, path=path)
