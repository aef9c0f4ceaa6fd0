"""The acceptance layer's config: the final job before the partitions open."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal, Optional

from pydantic import Field, model_validator

from ...config.project import PROJECT
from ...config.types import CheckName, Strict, Text

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


class DeepCheck(Strict):
    """A command run inside the acceptance jobs on real GPUs (`dcgmi diag -r 1`, NCCL's
    `all_reduce_perf`): it passes on exit 0 and, with `figure`, when the number that regular
    expression's one group reads from its output is at least `min_figure`."""

    name: CheckName
    command: Text
    #: node: in every node's job with all the node's GPUs; fleet: one task on every node judged
    scope: Literal["node", "fleet"] = "node"
    figure: Optional[Text] = None
    min_figure: Optional[float] = None
    timeout_s: int = Field(600, ge=10, le=86400)

    @model_validator(mode="after")
    def _figure(self) -> DeepCheck:
        if self.figure is not None:
            try:
                groups = re.compile(self.figure).groups
            except re.error as e:
                raise ValueError(f"figure: {self.figure!r} is not a regular expression ({e})") from None
            if groups != 1:
                raise ValueError(f"figure: {self.figure!r} must have exactly one group (the number), "
                                 f"it has {groups}")
        if self.min_figure is not None and self.figure is None:
            raise ValueError("min_figure needs figure: the expression that reads the number")
        return self


class AcceptanceLayer(Strict):
    """A job on every admitted node, then one across them; nodes that fail are drained."""

    enabled: bool = True
    job_timeout_s: int = Field(300, ge=10)
    #: nodes that must pass for the partitions to open (default: every admitted node)
    min_nodes: Optional[int] = Field(None, ge=1)
    #: the memory each node's job asks for: its cgroup's limit must be exactly this
    job_mem_mib: int = Field(256, ge=64)
    #: checks that need real GPUs (docs/acceptance-deep-checks.md); the lab plays them with a stand-in
    deep_checks: list[DeepCheck] = Field(default_factory=list)


def check(cfg: FleetConfig) -> list[str]:
    """min_nodes and the job's memory must fit the Slurm nodes the stack declares."""
    a, nodes = cfg.acceptance, cfg.slurm_nodes()
    if not (a.enabled and cfg.slurm.enabled and nodes):
        return []
    problems = []
    if a.min_nodes is not None and a.min_nodes > len(nodes):
        problems.append(f"{PROJECT}:acceptance.min_nodes: {a.min_nodes} is more than the {len(nodes)} "
                        "nodes in Slurm partitions")
    names = [c.name for c in a.deep_checks]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{PROJECT}:acceptance.deep_checks: the name {name!r} is used twice")
    small = [n.name for n in nodes if n.real_memory_mib < a.job_mem_mib]
    if small:
        problems.append(f"{PROJECT}:acceptance.job_mem_mib: {a.job_mem_mib} MiB is more than the real memory "
                        f"of {', '.join(small)}")
    return problems
