"""One way to declare the seed's single-GPU acceptance job, shared by the Slurm layer's
canary-first gate (inside its rollout) and the acceptance layer's final run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

import pulumi

from ...config.fleet import FleetConfig
from ...hosts import conn_input
from ..slurm.render import ACCEPTANCE_PARTITION
from .job import CanaryJob


@dataclass(frozen=True)
class JobPaths:
    """What the job reads, writes and must fail to write: without the storage layer, a job
    root in /tmp and nothing else; with it, the store's marker, its job root and the
    read-only model mount (the storage layer's outputs)."""

    marker: Optional[str] = None
    job_root: str = "/tmp"
    readonly_probe: Optional[str] = None


@dataclass(frozen=True)
class JobSpec:
    """Where and how the job runs, the same for every acceptance run of a stack."""

    cfg: FleetConfig
    root: Path
    accounting: bool
    paths: JobPaths = JobPaths()

    def job(self, name: str, node: pulumi.Output[str], on: pulumi.Output[list], triggers: Mapping,
            after: Sequence[pulumi.Resource], open_partitions: bool,
            parent: pulumi.Resource) -> CanaryJob:
        """The job on `node`, with every node of `on` registered and idle first."""
        cfg, s = self.cfg, self.cfg.slurm
        by_name = {n.name: n for n in cfg.nodes}
        return CanaryJob(
            name, conn=conn_input(cfg.hosts.controller, cfg.ssh, self.root), node=node,
            gpus=node.apply(lambda c: by_name[c].gpus.count if c else 0),
            gpu_type=node.apply(lambda c: by_name[c].gpus.type if c else ""),
            user=s.canary_user, nodes=on,
            partitions=[p.name for p in s.partitions], partition=ACCEPTANCE_PARTITION,
            node_conns=on.apply(lambda ns: [conn_input(by_name[n], cfg.ssh, self.root) for n in ns]),
            accounting=self.accounting, open_partitions=open_partitions, job_root=self.paths.job_root,
            marker=self.paths.marker, readonly_probe=self.paths.readonly_probe,
            timeout_s=cfg.acceptance.job_timeout_s, triggers=dict(triggers),
            opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)))
