"""The workload layer's config: the render pipeline the final acceptance runs, and its gates."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import Field

from ...config.project import PROJECT
from ...config.types import DebianVersion, GresRequest, HostName, LocalPath, PackageName, Strict, UserName

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


class Geometry(Strict):
    """The film: its picture and its length (the seed's 30 s at 24 fps, 720 frames)."""

    width: int = Field(320, ge=16, le=8192, multiple_of=2)
    height: int = Field(180, ge=16, le=8192, multiple_of=2)
    fps: int = Field(24, ge=1, le=240)
    duration_s: int = Field(30, ge=1, le=3600)
    #: the sound's sample rate (the seed's 32 kHz: 960,000 ticks for 30 s)
    audio_rate: int = Field(32000, ge=8000, le=192000)


class RenderJob(Strict):
    """The render job's shape: one rank a node, each rendering one segment (the seed's
    `--nodes=3 --ntasks-per-node=1 --gres=gpu:v100:8 --cpus-per-task=80 --mem=176G`)."""

    nodes: int = Field(3, ge=1, le=1024)
    gres: Optional[GresRequest] = None
    cpus_per_task: int = Field(1, ge=1, le=1024)
    mem_mib: int = Field(400, ge=64)
    #: the render command: a script on this machine packed into the runtime, run by every rank
    #: with the stand-in's arguments (width, height, fps, frames per segment) and environment
    #: (RT, MEDIA_DIR, SLURM_PROCID, SLURM_NTASKS); unset: the lab's STAND-IN (onhost/render.sh)
    script: Optional[LocalPath] = None


class Thresholds(Strict):
    """The gates' bounds (recorded in the runtime's thresholds.json and in verification.json)."""

    join_ssim: float = Field(0.97, gt=0, le=1)
    endpoint_ssim: float = Field(0.99, gt=0, le=1)
    #: a frame's difference to its neighbours, relative to the film's median: below `motion_low`
    #: (frozen) or above `motion_high` (skipped) fails, where the median is at least `motion_min`
    motion_low: float = Field(0.3, ge=0, le=1)
    motion_high: float = Field(1.7, ge=1)
    motion_min: float = Field(0.5, ge=0)
    black_s: float = Field(0.5, gt=0)
    silence_db: float = Field(-50, le=0)
    silence_s: float = Field(0.1, gt=0)
    lufs_min: float = Field(-30, le=0)
    lufs_max: float = Field(-14, le=0)
    true_peak_max: float = Field(-1.0, le=0)


class WorkloadLayer(Strict):
    """The seed's seventh criterion: the render pipeline as Slurm jobs on the accepted fleet
    (stage P0, render across `render.nodes` nodes with `afterok:P0`, assemble, gate and publish),
    its film judged by real media gates and published by one rename, rolled back by one rename.

    Runs after the fleet acceptance, as `user` (default: the Slurm layer's canary user), on the
    storage layer's data store (every node mounts it): the runtime archive under
    `<data>/inputs/gpu-fleet-workload/`, each run under `<data>/outputs/gpu-fleet-workload/`."""

    enabled: bool = False
    user: Optional[UserName] = None
    account: Optional[HostName] = None
    partition: Optional[HostName] = None
    geometry: Geometry = Geometry()
    render: RenderJob = RenderJob()
    thresholds: Thresholds = Thresholds()
    #: the CPU jobs' memory (P0, assembly, gates)
    post_mem_mib: int = Field(512, ge=64)
    #: how long one `pulumi up` waits for the whole pipeline (and each job's time limit)
    timeout_s: int = Field(1800, ge=60, le=7 * 24 * 3600)
    #: exact Debian packages every node needs for the jobs (zstd: the runtime is a .tar.zst)
    node_packages: dict[PackageName, DebianVersion] = Field(default_factory=dict)

    @property
    def frames(self) -> int:
        return self.geometry.fps * self.geometry.duration_s


def check(cfg: FleetConfig) -> list[str]:
    """The workload's rules that need the whole fleet: a store every node mounts, a partition
    that exists, a film that splits into whole segments over nodes the fleet has."""
    w = cfg.workload
    if not w.enabled:
        return []
    where = f"{PROJECT}:workload"
    problems = []
    if not cfg.storage.enabled:
        problems.append(f"{where}: needs the storage layer (storage.enabled): the segments, the film and its "
                        "release live on its data store, which every node mounts")
    if not cfg.acceptance.enabled:
        problems.append(f"{where}: needs the acceptance layer (acceptance.enabled): the workload runs on the "
                        "fleet the acceptance proved")
    partitions = [p.name for p in cfg.slurm.partitions]
    if w.partition is not None and w.partition not in partitions:
        problems.append(f"{where}.partition: {w.partition!r} is not a Slurm partition "
                        f"({', '.join(partitions) or 'none'})")
    nodes = cfg.slurm_nodes()
    if w.render.nodes > len(nodes):
        problems.append(f"{where}.render.nodes: {w.render.nodes} nodes, but the fleet has {len(nodes)} Slurm nodes")
    if w.frames % w.render.nodes:
        problems.append(f"{where}.render.nodes: {w.frames} frames ({w.geometry.fps} fps x {w.geometry.duration_s} s) "
                        f"do not split into {w.render.nodes} whole segments")
    smallest = min((n.real_memory_mib for n in nodes), default=0)
    for field, mib in (("render.mem_mib", w.render.mem_mib), ("post_mem_mib", w.post_mem_mib)):
        if nodes and mib > smallest:
            problems.append(f"{where}.{field}: {mib} MiB is more than the smallest node's real_memory_mib ({smallest})")
    t = w.thresholds
    if t.lufs_min > t.lufs_max:
        problems.append(f"{where}.thresholds.lufs_min: {t.lufs_min} is above lufs_max ({t.lufs_max})")
    return problems
