"""Pure renderers of the model snapshot layer: where things live, the downloader's config and
its oneshot unit (download, prove, check, publish, in that order, each step a separate
ExecStart so the unit stops at the first that fails)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Union

from ..storage.config import StoreSpec
from ..storage.stores import Store
from .config import ModelSnapshotLayer

#: the models store, as the config holds it or as the storage layer hands it on
Models = Union[StoreSpec, Store]

#: everything the layer installs on the storage host lives under here (removed by rollback)
HOME = "/opt/gpu-fleet/model-snapshot"
VENV = f"{HOME}/venv"
WHEELS = f"{HOME}/wheels.tar"
CONFIG = "/etc/gpu-fleet/model-snapshot.json"
TOKEN = "/etc/gpu-fleet/model-snapshot.token"
UNIT = "gpu-fleet-model-download.service"
#: the manifest inside a published snapshot
MANIFEST = ".gpu-fleet/manifest.json"
HEADER = "managed by gpu-fleet (model snapshot layer)"


@dataclass(frozen=True)
class Places:
    """Where one revision is downloaded, proven and published on the storage host, and where
    the nodes see it."""

    stage: str
    state: str
    dest: str
    client: str

    @classmethod
    def of(cls, m: ModelSnapshotLayer, models: Models) -> "Places":
        rel = f"{m.repo_id}/{m.revision}"
        return cls(stage=f"{models.mountpoint}/{m.staging_dir}/{rel}",
                   state=f"{models.mountpoint}/{m.staging_dir}/{rel}.gpu-fleet",
                   dest=f"{models.mountpoint}/{rel}", client=f"{models.client_mount}/{rel}")


def render_config(m: ModelSnapshotLayer, models: Models, token: bool) -> str:
    """The downloader's config file (no secret: the token is a separate 0600 file)."""
    p = Places.of(m, models)
    body = {"repo_id": m.repo_id, "revision": m.revision, "endpoint": m.endpoint,
            "allow_patterns": list(m.allow_patterns), "max_workers": m.max_workers, "attempts": m.attempts,
            "expected_files": m.expected_files, "expected_bytes": m.expected_bytes,
            "stage": p.stage, "state": p.state, "token_file": TOKEN if token else None,
            "_comment": HEADER}
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def render_unit(m: ModelSnapshotLayer, models: Models) -> str:
    p = Places.of(m, models)
    py = f"{VENV}/bin/python"
    return "\n".join([
        f"# {HEADER}",
        "# Started by `pulumi up` (never at boot): download, prove every file against the hub's",
        "# listing, check the safetensors headers, then publish with one rename.",
        "[Unit]",
        f"Description=gpu-fleet model snapshot {m.repo_id}@{m.revision}",
        "Wants=network-online.target",
        "After=network-online.target",
        f"RequiresMountsFor={models.mountpoint}",
        "",
        "[Service]",
        "Type=oneshot",
        f"TimeoutStartSec={m.timeout_s}",
        "# root for the rename into the root-owned store, but it writes only there and to /run",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectHome=yes",
        "ProtectSystem=strict",
        f"ReadWritePaths={models.mountpoint} /run",
        "CapabilityBoundingSet=CAP_CHOWN CAP_FOWNER CAP_DAC_OVERRIDE CAP_FSETID",
        f"ExecStart={py} {HOME}/download.py {CONFIG}",
        f"ExecStart={py} {HOME}/verify.py manifest --root {p.stage} --expected {p.state}/expected.json "
        f"--repo {m.repo_id} --revision {m.revision} --out {p.state}/manifest.json --workers {m.max_workers}",
        f"ExecStart={py} {HOME}/verify.py check --root {p.stage} --manifest {p.state}/manifest.json",
        f"ExecStart=/bin/sh {HOME}/publish.sh {p.stage} {p.state} {p.dest}",
        "",
    ])
