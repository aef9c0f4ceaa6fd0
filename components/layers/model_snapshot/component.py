"""The model snapshot layer: one pinned revision, downloaded once, proven, published atomically,
read-only on every node (the seed's 模型只下载一次).

On the storage host, in order:

1. the downloader: a venv with huggingface_hub from wheels the layer ships (`Payload`:
   the stack records the tarball's SHA-256, not its bytes; pip installs with
   `--no-index --require-hashes`), its scripts, its config and the token file (a Pulumi
   secret, 0600), and a oneshot unit that never starts at boot;
2. `Snapshot`: while the revision is not published, `pulumi up` starts the unit and waits:
   download into `<models>/<staging_dir>/<repo>/<revision>` (resuming partial files,
   skipping finished ones), a manifest of every file's size and SHA-256 proven against the
   hub's listing (huggingface_hub itself checks sizes only), the safetensors headers
   checked, then one rename to `<models>/<repo>/<revision>`: a rename on one filesystem is
   atomic (the path shows the whole snapshot or nothing) and costs no copy of 144 GB; a ZFS
   clone would be a filesystem of its own, which a kernel nfsd exports only with
   `crossmnt` and ganesha does not see until it re-reads its exports. Then, on every
   rollout, the independent check of the published tree.
3. `SnapshotView`: every node that mounts the store sees the manifest's files with their
   sizes and cannot write into the snapshot. The acceptance job reads its marker from it.

Rollback removes the unit, the scripts, the config, the token and the venv; the published
snapshot and any partial download stay (a later `up` reuses them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pulumi

from ...kit import after_of, sh
from ...errors import FleetError
from ...providers import CommandWithVerify, File, PackageSet, Payload, SystemdUnit
from ...scripts import script, script_path
from ...site import Site
from ..slurm.canary import JobPaths
from ..storage.component import StorageOutputs
from .config import ModelSnapshotLayer
from .render import CONFIG, HOME, MANIFEST, TOKEN, UNIT, VENV, WHEELS, Places, render_config, render_unit
from .snapshot import Snapshot, SnapshotView

_VENV = script(__file__, "venv.sh")
#: the wheels tarball scripts/setup.sh builds (relative to the project root)
WHEELS_TARBALL = ".tools/model-downloader/wheels.tar"
REQUIREMENTS = Path(__file__).resolve().parent / "downloader.txt"
#: what the storage host runs (download.py, verify.py): written there as files, never imported here
ONHOST = Path(__file__).with_name("onhost")


def hub_version() -> str:
    """The huggingface_hub version the downloader's requirements pin."""
    m = re.search(r"^huggingface-hub==(\S+)", REQUIREMENTS.read_text(), re.M)
    assert m, f"{REQUIREMENTS} pins no huggingface-hub"
    return m.group(1)


@dataclass(frozen=True, kw_only=True)
class ModelSnapshotInputs:
    site: Site
    model: ModelSnapshotLayer
    #: the models store, its datasets and the nodes whose mounts passed
    storage: StorageOutputs
    #: the hub token, where the model's repository needs one
    token: Optional[pulumi.Output[str]] = None


@dataclass(frozen=True)
class ModelSnapshotOutputs:
    snapshot: Snapshot
    view: SnapshotView
    #: what the final acceptance job reads (the snapshot's marker) and must fail to write
    job_paths: JobPaths

    def exports(self) -> dict[str, pulumi.Input]:
        s = self.snapshot
        return {"modelSnapshot": pulumi.Output.all(s.manifest_sha256, s.checks, s.download, self.view.seen_by).apply(
            lambda t: {"manifestSha256": t[0], "checks": t[1], "download": t[2], "seenBy": t[3]})}


class ModelSnapshot(pulumi.ComponentResource):
    """The pinned model revision on the storage host's models store, seen by every node."""

    def __init__(self, name: str, inputs: ModelSnapshotInputs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-fleet:model:ModelSnapshot", name, None, opts)
        site, m, models = inputs.site, inputs.model, inputs.storage.models
        conn = site.conn(site.hosts.storage)
        after = after_of(self)
        tarball = site.root / WHEELS_TARBALL
        if not tarball.is_file():
            raise FleetError(f"model snapshot: the downloader's wheels ({tarball}) are missing; run "
                             "`make setup` (it fetches them for the storage host)")
        places = Places.of(m, models)

        first: list[pulumi.Resource] = [inputs.storage.datasets]
        if m.packages:
            first = [PackageSet("model-downloader-packages", conn=conn, packages=dict(m.packages), hold=True,
                                opts=after(*first))]
        wheels = Payload("model-downloader-wheels", conn=conn, path=WHEELS, source=tarball, opts=after(*first))
        version = hub_version()
        venv = CommandWithVerify(
            "model-downloader-venv", conn=conn, create=sh(_VENV, VENV, WHEELS),
            verify=[f"{VENV}/bin/python", "-c", "import sys, huggingface_hub as h; "
                    f"sys.exit(h.__version__ != {version!r})"],
            delete=["rm", "-rf", "--", VENV], triggers={"wheels": wheels.sha256}, opts=after(wheels))
        files = [File(f"model-downloader-{name.replace('.', '-')}", conn=conn, path=f"{HOME}/{name}",
                      content=path.read_text(), mode="0755", opts=after(venv))
                 for name, path in (("download.py", ONHOST / "download.py"),
                                    ("verify.py", ONHOST / "verify.py"),
                                    ("publish.sh", script_path(__file__, "publish.sh")))]
        files.append(File("model-downloader-config", conn=conn, path=CONFIG,
                          content=render_config(m, models, inputs.token is not None), opts=after(venv)))
        if inputs.token is not None:
            files.append(File("model-downloader-token", conn=conn, path=TOKEN, content=inputs.token, mode="0600",
                              secret=True, opts=after(venv)))
        unit_text = render_unit(m, models)
        unit = SystemdUnit("model-downloader-unit", conn=conn, unit=UNIT, content=unit_text, enabled=False,
                           active=False, opts=after(*files))
        # the layer's check: both required when it is enabled (and it is built only then)
        assert m.repo_id is not None and m.revision is not None
        snapshot = Snapshot(
            "model-snapshot", conn=conn, repo_id=m.repo_id, revision=m.revision, unit=UNIT,
            python=f"{VENV}/bin/python", verify=f"{HOME}/verify.py", stage=places.stage, state=places.state,
            dest=places.dest, manifest=f"{places.dest}/{MANIFEST}", marker=m.marker, timeout_s=m.timeout_s,
            triggers={"store": inputs.storage.datasets.guids}, opts=after(unit))
        nodes = site.slurm_nodes()
        view = SnapshotView(
            "model-snapshot-view", conn=conn, nodes=[site.conn(n) for n in nodes],
            on=inputs.storage.clients.passed, path=places.client, marker=m.marker, files=snapshot.files,
            max_parallel=site.ssh.max_parallel, triggers={"manifest": snapshot.manifest_sha256},
            opts=after(snapshot, inputs.storage.clients))
        self.outputs = ModelSnapshotOutputs(
            snapshot=snapshot, view=view,
            job_paths=JobPaths(marker=f"{places.client}/{m.marker}",
                               job_root=inputs.storage.job_paths.job_root, readonly_probe=places.client))
        self.register_outputs({})
