"""The acceptance layer's config: the final job before the partitions open."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import Field

from ...config.project import PROJECT
from ...config.types import Strict

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


class AcceptanceLayer(Strict):
    """A job on every admitted node, then one across them; nodes that fail are drained."""

    enabled: bool = True
    job_timeout_s: int = Field(300, ge=10)
    #: nodes that must pass for the partitions to open (default: every admitted node)
    min_nodes: Optional[int] = Field(None, ge=1)
    #: the memory each node's job asks for: its cgroup's limit must be exactly this
    job_mem_mib: int = Field(256, ge=64)


def check(cfg: FleetConfig) -> list[str]:
    """min_nodes and the job's memory must fit the Slurm nodes the stack declares."""
    a, nodes = cfg.acceptance, cfg.slurm_nodes()
    if not (a.enabled and cfg.slurm.enabled and nodes):
        return []
    problems = []
    if a.min_nodes is not None and a.min_nodes > len(nodes):
        problems.append(f"{PROJECT}:acceptance.min_nodes: {a.min_nodes} is more than the {len(nodes)} "
                        "nodes in Slurm partitions")
    small = [n.name for n in nodes if n.real_memory_mib < a.job_mem_mib]
    if small:
        problems.append(f"{PROJECT}:acceptance.job_mem_mib: {a.job_mem_mib} MiB is more than the real memory "
                        f"of {', '.join(small)}")
    return problems
