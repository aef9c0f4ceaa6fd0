"""Pure renderers of the workload layer: where everything lives, the gates' spec, the four batch
scripts of the pipeline and the slurm.conf line of its Epilog.

The jobs' order is not in the scripts: the submit step (scripts/submit.sh) chains them with
`--dependency=afterok:<previous>` and `--kill-on-invalid-dep=yes`, so a failed step cancels the
rest and nothing downstream ever starts on a missing input. Every job runs its step through the
node's task.sh (stage the runtime by hash, run it, remove it), never a tool from the batch PATH.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from typing import Any, Optional

from .config import WorkloadLayer

#: on every Slurm node, before slurmd starts (the Epilog must exist when slurm.conf names it)
NODE_DIR = "/opt/gpu-fleet/workload"
NODE_SCRIPTS = ("task.sh", "stage.sh", "reap.sh", "epilog.sh")
EPILOG = f"{NODE_DIR}/epilog.sh"
#: the jobs' node-local directories (task.sh, epilog.sh): every job user's, only an owner removes
NODE_BASE = "/var/tmp/gpu-fleet-workload"
#: the batch scripts, on the controller (submitted from there as the workload's user)
JOBS_DIR = "/etc/gpu-fleet/workload"
JOBS = ("p0", "render", "assemble", "qa")
#: under the storage layer's data store (server side: its mountpoint; nodes: its client mount)
RUNTIME_DIR = "inputs/gpu-fleet-workload"
WORK_DIR = "outputs/gpu-fleet-workload"
#: what the steps ask of the runtime's ffmpeg (the P0 preflight checks every one)
FILTERS = ("color", "geq", "sine", "anoisesrc", "amix", "atrim", "asetpts", "concat", "showinfo", "ssim", "tblend",
           "signalstats", "metadata", "blackdetect", "silencedetect", "ebur128", "select", "tile")
ENCODERS = ("libx264", "aac", "pcm_s16le")
#: the CPU jobs' memory (staging, assembly, gates: a few hundred MiB at any lab geometry)
JOB_NAME = "gpu-fleet-workload"


@dataclass(frozen=True)
class Places:
    """One stack's paths: `runtime` and `runs` as the nodes see them, `server_*` on the storage host."""

    runtime: str
    runs: str
    releases: str
    server_runtime: str
    server_runs: str
    server_releases: str

    @classmethod
    def of(cls, data_mountpoint: str, data_client_mount: str, runtime_sha: str) -> Places:
        name = f"runtime-{runtime_sha[:16]}.tar.zst"
        return cls(runtime=f"{data_client_mount}/{RUNTIME_DIR}/{name}",
                   runs=f"{data_client_mount}/{WORK_DIR}/runs", releases=f"{data_client_mount}/{WORK_DIR}/releases",
                   server_runtime=f"{data_mountpoint}/{RUNTIME_DIR}/{name}",
                   server_runs=f"{data_mountpoint}/{WORK_DIR}/runs",
                   server_releases=f"{data_mountpoint}/{WORK_DIR}/releases")


def segments(w: WorkloadLayer) -> tuple[int, list[int]]:
    """(frames per segment, the join frames: the first frame of every segment but the first)."""
    per = w.frames // w.render.nodes
    return per, [per * k for k in range(1, w.render.nodes)]


def spec(w: WorkloadLayer) -> dict[str, Any]:
    """What the gates judge the film against (gates.py; the runtime's ffmpeg is filled in on the node)."""
    g = w.geometry
    per, joins = segments(w)
    return {"frames": w.frames, "width": g.width, "height": g.height, "fps": g.fps, "duration_s": g.duration_s,
            "audio_rate": g.audio_rate, "joins": joins, "anchors": [], "segments": w.render.nodes,
            "segment_frames": per,
            "thresholds": w.thresholds.model_dump()}


def slurm_lines() -> tuple[str, ...]:
    """The backstop for cleanup a task's trap cannot do (its shell killed outright, a node's
    slurmd restarted): slurmd runs the Epilog as root on every node of every job once it ended."""
    return (f"Epilog={EPILOG}",)


def _header(w: WorkloadLayer, step: str, places: Places, *, nodes: int = 1, mem_mib: int,
            cpus: int = 1, gres: Optional[str] = None) -> list[str]:
    opts = [f"--job-name={JOB_NAME}-{step}", f"--nodes={nodes}", "--ntasks-per-node=1", f"--cpus-per-task={cpus}",
            f"--mem={mem_mib}M", f"--time={math.ceil(w.timeout_s / 60)}", f"--output={places.runs}/slurm-%j.out"]
    if gres:
        opts.append(f"--gres={gres}")
    if w.partition:
        opts.append(f"--partition={w.partition}")
    if w.account:
        opts.append(f"--account={w.account}")
    return ["#!/bin/sh", *(f"#SBATCH {o}" for o in opts)]


def _task(places: Places, runtime_sha: str, step: str, *args: object) -> str:
    return shlex.join(["sh", f"{NODE_DIR}/task.sh", places.runtime, runtime_sha, step, *map(str, args)])


def batch_scripts(w: WorkloadLayer, places: Places, runtime_sha: str) -> dict[str, str]:
    """The pipeline's four batch scripts (name -> text). Each later job finds its run by GF_RUN
    (P0's job id), which the submit step exports; the QA job names the release by the render
    job's id (GF_FILM_JOB)."""
    per, _ = segments(w)
    g, r = w.geometry, w.render
    mem = w.post_mem_mib
    run = f'{places.runs}/"$GF_RUN"'
    body = {
        "p0": ["# P0: the runtime staged and checked by hash on a node, its ffmpeg's filters and encoders",
               "# checked (the seed's R0-R1); the run's directory and the gates' spec written",
               "set -eu", "GF_RUN=$SLURM_JOB_ID", f"mkdir -p {run}/media",
               f"cat > {run}/spec.json <<'EOF'", json.dumps(spec(w), sort_keys=True), "EOF",
               "exec " + _task(places, runtime_sha, "preflight.sh", ",".join(FILTERS), ",".join(ENCODERS))],
        "render": ["# one rank a node, each its own segment (SLURM_PROCID), printing the geometry it received",
                   "set -eu", f"MEDIA_DIR={run}/media", "export MEDIA_DIR",
                   "exec srun --kill-on-bad-exit=1 " + _task(places, runtime_sha, "render.sh", g.width, g.height,
                                                              g.fps, per)],
        "assemble": ["# the segments, in order, into one film (its receipts checked in the same MEDIA_DIR)",
                     "set -eu", f"MEDIA_DIR={run}/media", f"ATTEMPT_DIR={run}/attempt", "export MEDIA_DIR ATTEMPT_DIR",
                     "exec " + _task(places, runtime_sha, "assemble.sh", r.nodes, g.duration_s * g.audio_rate)],
        "qa": ["# every gate over the film, the joins' contact sheet, and publication only if all passed",
               "set -eu", f"RUN_DIR={run}", f"PUBLISH_ROOT={places.releases}", "export RUN_DIR PUBLISH_ROOT",
               "exec " + _task(places, runtime_sha, "qa.sh", *segments(w)[1])],
    }
    shapes = {"p0": {"mem_mib": mem}, "assemble": {"mem_mib": mem}, "qa": {"mem_mib": mem},
              "render": {"nodes": r.nodes, "mem_mib": r.mem_mib, "cpus": r.cpus_per_task, "gres": r.gres}}
    return {name: "\n".join([*_header(w, name, places, **shapes[name]), *body[name]]) + "\n"  # type: ignore[arg-type]
            for name in JOBS}
