"""The lab's Slurm-web images and registry: `python -m lab web-images` (issues 15, 38).

Slurm-web 6.0.0 is on no registry reachable here, so the lab builds its agent and gateway images
from the vendored source tarball (build.py, sources.py: Debian 12's Python from the lab apt
repository, pinned wheels, the frontend from its lock file; cached machine-wide by their inputs)
and serves them from the lab's own registry: Debian's docker-registry on the `storage` host, plain
HTTP on :5000 (registry.sh), as `storage:5000/gpu-fleet/slurm-web-agent` and
`.../slurm-web-gateway`, each tagged `6.0.0-<its build key>`. They are pushed from the storage host
itself (a one-shot podman store in a temp dir, removed after), never from the controller, whose
podman store the web layer fills by pulling by digest.

`.state/lab/web-images.json` records the digests podman pushed (`--digestfile`):
{"registry": "storage:5000", "agent": "storage:5000/gpu-fleet/slurm-web-agent@sha256:...",
 "gateway": "storage:5000/gpu-fleet/slurm-web-gateway@sha256:...", "tags": {"agent": TAG, ...}}.
The command is idempotent: with the unit active and enabled and both tags served, it pushes
nothing and only prints and records the digests; on a storage host made again (lab up after
down, reimage) it sets the registry up and pushes again. The build is deterministic, so the
same inputs give the same digests.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .. import stackfile
from ..common import STATE, LabError, cache_dir, flock, log, rel, require_root
from ..hosts import Host
from ..ssh import ssh_argv
from . import build

RECORD = STATE / "web-images.json"
REGISTRY = "storage:5000"
PORT = 5000
SCRIPT = Path(__file__).with_name("registry.sh")
ACCEPT = ", ".join(["application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.v2+json"])


def running_lab() -> tuple[Host, Path | None]:
    """The running lab's storage host, and the apt repository its hosts have bound (None when
    that one is gone from the cache)."""
    inv, hosts = stackfile.running_inventory()
    repo = cache_dir() / f"repo-{inv.get('repo')}"
    repo_dir = repo if (repo / "Packages").exists() else None
    for h in hosts:
        if "storage" in h.roles:
            return h, repo_dir
    raise LabError("the lab has no storage host")


def on_storage(h: Host, *args: str, stdin: bytes = b"", timeout: float = 600) -> str:
    """registry.sh ARGS on the storage host; its stdout."""
    cmd = shlex.join(["bash", "-c", SCRIPT.read_text(), "lab-registry", *args])
    p = subprocess.run([*ssh_argv(h.address, connect_timeout=10), "--", cmd], input=stdin,
                       capture_output=True, timeout=timeout)
    if p.returncode != 0:
        raise LabError(f"{h.name}: registry.sh {' '.join(args)} exited {p.returncode}:\n"
                       f"{p.stdout.decode(errors='replace').strip()}\n{p.stderr.decode(errors='replace').strip()}")
    return p.stdout.decode()


def manifest_digest(address: str, repository: str, reference: str) -> str | None:
    """The digest the registry serves for repository:reference (a tag or a digest), or None."""
    req = urllib.request.Request(f"http://{address}:{PORT}/v2/{repository}/manifests/{reference}",
                                 method="HEAD", headers={"Accept": ACCEPT})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=5) as r:
            return r.headers.get("Docker-Content-Digest")
    except (urllib.error.URLError, OSError):
        return None


def unit_ok(h: Host) -> bool:
    p = subprocess.run([*ssh_argv(h.address, connect_timeout=10), "--",
                        "systemctl is-active -q docker-registry.service && "
                        "systemctl is-enabled -q docker-registry.service"],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    return p.returncode == 0


def served(h: Host, images: dict) -> dict[str, str]:
    """component -> digest, for each image whose tag the registry serves (and whose digest it
    serves as itself)."""
    found = {}
    for comp, img in images.items():
        d = manifest_digest(h.address, img["repository"], img["tag"])
        if d and manifest_digest(h.address, img["repository"], d) == d:
            found[comp] = d
    return found


def record(info: dict, digests: dict[str, str]) -> dict:
    doc: dict[str, Any] = {"registry": REGISTRY}
    for comp, img in info["images"].items():
        doc[comp] = f"{REGISTRY}/{img['repository']}@{digests[comp]}"
    doc["tags"] = {comp: img["tag"] for comp, img in info["images"].items()}
    if not RECORD.exists() or json.loads(RECORD.read_text() or "{}") != doc:
        RECORD.parent.mkdir(parents=True, exist_ok=True)
        tmp = RECORD.with_name(RECORD.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(RECORD)
    return doc


def _archives(info: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for comp, img in info["images"].items():
            tar.add(img["archive"], arcname=f"{comp}.oci.tar")
    return buf.getvalue()


def ensure() -> dict:
    """The registry on the storage host serving both images; returns the record."""
    require_root()
    start = time.monotonic()
    h, repo_dir = running_lab()
    with flock(STATE / ".web-images.lock", "web-images"):
        info = build.ensure(repo_dir)  # from the packages the hosts install from
        images = info["images"]
        found = served(h, images) if unit_ok(h) else {}
        if len(found) == len(images):
            doc = record(info, found)
            log(f"web images: the registry on {h.name} already serves both ({time.monotonic() - start:.1f} s); "
                f"recorded in {rel(RECORD)}")
        else:
            out = on_storage(h, "setup", timeout=300)
            for line in out.splitlines():
                log(f"  {h.name}: {line}")
            t_push = time.monotonic()
            refs = [f"{comp}={img['repository']}:{img['tag']}" for comp, img in images.items()]
            out = on_storage(h, "push", *refs, stdin=_archives(info))
            pushed = dict(line.split() for line in out.splitlines() if line.strip())
            digests = {comp: pushed.get(img["repository"], "") for comp, img in images.items()}
            check = served(h, images)
            bad = [c for c in images if not digests[c] or check.get(c) != digests[c]]
            if bad:
                raise LabError(f"web images: after the push the registry on {h.name} does not serve "
                               f"{', '.join(bad)} (pushed {digests}, served {check})")
            doc = record(info, digests)
            log(f"web images: pushed to {REGISTRY} in {time.monotonic() - t_push:.1f} s "
                f"(total {time.monotonic() - start:.1f} s); recorded in {rel(RECORD)}")
    for comp in images:
        log(f"  {comp:8} {doc[comp]}")
    return doc


def main(args) -> int:
    doc = ensure()
    if getattr(args, "json", False):
        print(json.dumps(doc, indent=1))
    return 0
