"""The workload layer: the seed's render pipeline run through Slurm on the accepted fleet, its film
judged by real media gates, published by one rename and rolled back by one rename.

Per node, before the Slurm layer starts slurmd with the workload's `Epilog` (Fleet hands these to
the Slurm layer as the node's prerequisites, as the health layer's files):
- `PackageSet` the jobs' packages (zstd), `Payload` task.sh, stage.sh, reap.sh and epilog.sh.

After the fleet acceptance:
- the runtime (runtime.py: the pinned static ffmpeg, the steps, the thresholds), packed here once
  per set of inputs (`.state/workload/`), `Payload` to the data store on the storage host;
- the run's directories on the data store (runs and releases, mode 1777);
- `File` the four batch scripts on the controller (render.py);
- `WorkloadRun` (pipeline.py): submit, wait, judge, the stack output `workload`.

Rollback renames the release (destroy); the runtime archive, the node scripts and the batch
scripts are removed; runs, segments and releases stay on the data store.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

import pulumi

from ...errors import FleetError
from ...kit import after_of, sh
from ...providers import CommandWithVerify, File, PackageSet, Payload
from ...scripts import script
from ...site import Site
from ..acceptance.component import REPORT_DIR
from ..acceptance.criteria import workload_row
from ..storage.config import StoreSpec
from . import runtime
from .config import WorkloadLayer
from .pipeline import WorkloadRun
from .render import JOBS_DIR, NODE_BASE, NODE_DIR, NODE_SCRIPTS, Places, batch_scripts, segments

_PREPARE = script(__file__, "prepare.sh")
#: where packed runtimes are kept on this machine (relative to the project root), by their inputs
CACHE_DIR = (".state", "workload")


def ffmpeg_binary() -> Path:
    """The pinned static ffmpeg (imageio-ffmpeg's, pinned in requirements.txt)."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise FleetError("workload: imageio-ffmpeg (the pinned static ffmpeg) is not installed; run `make setup`") \
            from None
    return Path(imageio_ffmpeg.get_ffmpeg_exe())


def packed_runtime(root: Path, w: WorkloadLayer) -> tuple[Path, str]:
    """The runtime archive for this stack's inputs (packed once, then reused) and its SHA-256."""
    ffmpeg = ffmpeg_binary()
    extra = {"render.sh": root / w.render.script} if w.render.script else {}
    for path in extra.values():
        if not path.is_file():
            raise FleetError(f"gpu-fleet:workload.render.script: {path} is not a file")
    key = hashlib.sha256()
    for path in [ffmpeg, *(runtime.ONHOST / n for n in runtime.SCRIPTS), *extra.values()]:
        key.update(hashlib.sha256(path.read_bytes()).digest())
    key.update(json.dumps(w.thresholds.model_dump(), sort_keys=True).encode())
    out = root.joinpath(*CACHE_DIR) / f"runtime-{key.hexdigest()[:24]}.tar.zst"
    sums = out.with_suffix(".sha256")
    if out.is_file() and sums.is_file():
        return out, sums.read_text().strip()
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = runtime.pack(out, ffmpeg, w.thresholds.model_dump(), extra)
    sums.write_text(digest + "\n")
    return out, digest


@dataclass(frozen=True, kw_only=True)
class WorkloadFilesInputs:
    site: Site
    workload: WorkloadLayer
    #: node -> what its files wait on
    node_after: Mapping[str, Sequence[pulumi.Resource]]


@dataclass(frozen=True)
class WorkloadFilesOutputs:
    #: node -> its task scripts and Epilog: slurmd must not start without them
    files: dict[str, list[pulumi.Resource]]

    def exports(self) -> dict[str, pulumi.Input]:
        return {}


class WorkloadFiles(pulumi.ComponentResource):
    """What every Slurm node runs for the workload's jobs (before slurmd names the Epilog)."""

    def __init__(self, name: str, inputs: WorkloadFilesInputs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-fleet:workload:WorkloadFiles", name, None, opts)
        w = inputs.workload
        files: dict[str, list[pulumi.Resource]] = {}
        for n in inputs.site.slurm_nodes():
            conn = inputs.site.conn(n)
            after = pulumi.ResourceOptions(parent=self, depends_on=list(inputs.node_after.get(n.name, ())))
            first: list[pulumi.Resource] = []
            if w.node_packages:
                first = [PackageSet(f"{n.name}-workload-packages", conn=conn, packages=dict(w.node_packages),
                                    hold=True, opts=after)]
            base = CommandWithVerify(
                f"{n.name}-workload-base", conn=conn, create=["install", "-d", "-m", "1777", NODE_BASE],
                verify=["sh", "-c", 'test "$(stat -c %a "$1")" = 1777', "sh", NODE_BASE], opts=after)
            files[n.name] = [*first, base, *(
                Payload(f"{n.name}-workload-{s.replace('.', '-')}", conn=conn, path=f"{NODE_DIR}/{s}",
                        source=runtime.ONHOST / s, mode="0755", opts=after) for s in NODE_SCRIPTS)]
        self.outputs = WorkloadFilesOutputs(files=files)
        self.register_outputs({})


@dataclass(frozen=True, kw_only=True)
class WorkloadInputs:
    site: Site
    workload: WorkloadLayer
    #: the storage layer's data store (the runtime, the runs, the releases)
    data: StoreSpec
    #: the packed runtime (packed_runtime) and its SHA-256
    runtime: tuple[Path, str]
    #: what the run waits on: the acceptance, the store's datasets and mounts, the node files
    after: Sequence[pulumi.Resource]
    accounting: bool
    #: who submits when workload.user is unset
    canary_user: str
    triggers: dict
    #: write row 7 of the acceptance report beside the state (the acceptance layer wrote it)
    report: bool = False


@dataclass(frozen=True)
class WorkloadOutputs:
    run: WorkloadRun

    def _read(self) -> pulumi.Output[dict]:
        """What the run read back, as its provider recorded it."""
        r = self.run
        return pulumi.Output.all(r.jobs, r.release, r.gates, r.passed, r.contact_sheet, r.run_dir).apply(
            lambda v: {"jobs": v[0], "release": v[1], "gates": v[2], "passed": v[3], "contact_sheet": v[4],
                       "run_dir": v[5]})

    def row(self) -> pulumi.Output[dict]:
        """Row 7 of the acceptance report, from what this run read back."""
        return self._read().apply(workload_row)

    def exports(self) -> dict[str, pulumi.Input]:
        return {"workload": self._read().apply(
            lambda v: {"jobs": v["jobs"], "release": v["release"], "gates": v["gates"], "passed": v["passed"],
                       "contactSheet": v["contact_sheet"], "runDir": v["run_dir"]})}


class Workload(pulumi.ComponentResource):
    """The render pipeline through Slurm, once the fleet is accepted."""

    def __init__(self, name: str, inputs: WorkloadInputs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-fleet:workload:Workload", name, None, opts)
        site, w, data = inputs.site, inputs.workload, inputs.data
        after = after_of(self)
        archive, sha = inputs.runtime
        places = Places.of(data.mountpoint, data.client_mount, sha)
        storage = site.conn(site.hosts.storage)
        ctl = site.conn(site.hosts.controller)
        dirs = (places.server_runtime.rsplit("/", 1)[0], places.server_runs, places.server_releases)
        prepare = CommandWithVerify(
            "workload-dirs", conn=storage, create=sh(_PREPARE, *dirs),
            verify=["sh", "-c", 'test -d "$1" && test -d "$2" && test -d "$3"', "sh", *dirs],
            opts=after(*inputs.after))
        shipped = Payload("workload-runtime", conn=storage, path=places.server_runtime, source=archive,
                          opts=after(prepare))
        texts = batch_scripts(w, places, sha)
        jobs = [File(f"workload-job-{name_}", conn=ctl, path=f"{JOBS_DIR}/{name_}", content=text, mode="0644",
                     opts=after(*inputs.after)) for name_, text in texts.items()]
        self.run = WorkloadRun(
            "workload-run", conn=ctl, storage_conn=storage, user=w.user or inputs.canary_user, jobs_dir=JOBS_DIR,
            accounting=inputs.accounting, timeout_s=w.timeout_s, runs=places.runs, releases=places.releases,
            server_runs=places.server_runs, server_releases=places.server_releases, runtime_sha256=sha,
            jobs_sha256=hashlib.sha256(json.dumps(texts, sort_keys=True).encode()).hexdigest()[:16],
            triggers={**inputs.triggers, "segments": segments(w)[0]},
            report={"dir": str(site.root.joinpath(*REPORT_DIR)), "stack": pulumi.get_stack()}
            if inputs.report else None,
            opts=after(shipped, *jobs, *inputs.after))
        self.outputs = WorkloadOutputs(run=self.run)
        self.register_outputs({})
