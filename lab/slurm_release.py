"""The lab's second Slurm release: Debian trixie's 24.11 rebuilt for bookworm.

The lab's hosts run Debian's Slurm 22.05, which has no ClusterID: the seed's
`CLUSTER ID MISMATCH` (and its adoption) needs 23.x or later. `build-slurm.sh`
rebuilds trixie's slurm-wlm source package on this machine (downloaded from the
Debian mirror of this machine's own apt sources, lab/apt_sources.py; checked
from trixie's signed InRelease down to each tarball's SHA-256; three small
packaging changes for bookworm, listed in the script) into .debs, cached
machine-wide under `<cache>/slurm-<version>-<key>/` keyed by the script. A
test copies them onto the storage host, where the stack's `slurm.release`
publishes them like any self-built release; their other dependencies are
bookworm packages the lab repository already serves.
"""

from __future__ import annotations

import os
from pathlib import Path

from .apt_sources import host_mirrors
from .common import LabError, cache_dir, flock, log, run_with_progress, sha16

SCRIPT = Path(__file__).with_name("build-slurm.sh")
VERSION = "24.11"
DEBIAN_VERSION = "24.11.5-4+deb13u1~bookworm1"
#: the build runs on bookworm; its sources come from the mirror of this machine's bookworm entry
HOST_SUITE = "bookworm"
#: what a stack needs to install it: slurm, its daemons' plugins and the accounting parts
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "slurmdbd", "slurmrestd", "slurm-wlm-basic-plugins",
            "slurm-wlm-mysql-plugin", "slurm-wlm-jwt-plugin")


def release_dir() -> Path:
    return cache_dir() / f"slurm-{DEBIAN_VERSION}-{sha16('slurm-release-v1', SCRIPT.read_bytes())}"


def debs(out: Path) -> list[Path]:
    return [out / f"{p}_{DEBIAN_VERSION}_amd64.deb" for p in PACKAGES]


def ensure_release() -> Path:
    """The built .debs (built once per machine and script; about 12 min on 2 cores)."""
    out = release_dir()
    ok = out.with_name(out.name + ".ok")
    if ok.exists() and all(p.exists() for p in debs(out)):
        return out
    with flock(cache_dir() / ".slurm-release.lock", "slurm release"):
        if ok.exists() and all(p.exists() for p in debs(out)):
            return out
        mirrors = host_mirrors(HOST_SUITE)
        work = cache_dir() / "slurm-build"
        logfile = work / "build.log"
        log(f"building Slurm {DEBIAN_VERSION} for the lab (log: {logfile})")
        run_with_progress(["bash", str(SCRIPT), str(out)], logfile, "slurm build", every=60,
                          env={**os.environ, "BASE": str(work), "MIRROR": mirrors.debian,
                               "SECMIRROR": mirrors.security or ""})
        missing = [p.name for p in debs(out) if not p.exists()]
        if missing:
            raise LabError(f"the Slurm build left out {', '.join(missing)}; see {logfile}")
        ok.write_text(DEBIAN_VERSION + "\n")
    return out
