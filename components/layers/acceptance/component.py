"""The acceptance layer: the fleet's final acceptance, the only thing that opens partitions.

It runs once everything Slurm serves with is in place (the Slurm layer's
reconfigure and, with accounting, the accounting verification): the seed's
single-GPU job on the stack's canary node if admitted (else the first admitted
GPU node), every admitted node registered and idle first. Passing sets the
production partitions UP; failing sets them INACTIVE and fails the deployment
(components/layers/slurm/canary.py). It runs again whenever anything the
Slurm layer applied changes (`triggers`), and not at all when nothing did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi

from ...site import Site
from ..slurm.canary import CanaryJob, JobSpec


@dataclass(frozen=True, kw_only=True)
class AcceptanceInputs:
    #: how the job runs (site, the Slurm layer's canary user and partitions, acceptance's timeout,
    #: the store's paths), shared with the Slurm layer's canary-first gate
    job: JobSpec
    #: acceptance.enabled: off, no job runs
    enabled: bool
    admitted: pulumi.Output[list]
    #: what the job must come after: the Slurm layer's reconfigure, accounting's check
    after: Sequence[pulumi.Resource]
    #: hashes of what the Slurm layer applied; a change re-runs the job
    triggers: Mapping[str, pulumi.Input]


@dataclass(frozen=True)
class AcceptanceOutputs:
    #: None when the stack has no GPU node to accept on, or acceptance is off
    canary: Optional[CanaryJob]

    def exports(self) -> dict[str, pulumi.Input]:
        """`canary`, where a job runs."""
        c = self.canary
        if c is None:
            return {}
        return {"canary": pulumi.Output.all(c.passed, c.job_id, c.cuda_visible_devices, c.cgroup).apply(
            lambda t: {"passed": t[0], "jobId": t[1], "cudaVisibleDevices": t[2], "cgroup": t[3]})}


def pick_canary(site: Site, admitted: list[str]) -> str:
    """The stack's canary if admitted, else the first admitted GPU node ('' if none)."""
    for n in [*site.canary_nodes(), *site.slurm_nodes()]:
        if n.name in admitted and n.gpus:
            return n.name
    return ""


class Acceptance(pulumi.ComponentResource):
    """The final acceptance job of a stack."""

    def __init__(self, name: str, inputs: AcceptanceInputs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-fleet:acceptance:Acceptance", name, None, opts)
        spec, site = inputs.job, inputs.job.site
        canary = None
        if inputs.enabled and any(n.gpus for n in site.slurm_nodes()):
            canary = spec.job("canary-acceptance", inputs.admitted.apply(lambda a: pick_canary(site, a)),
                              inputs.admitted, {**inputs.triggers, "admitted": inputs.admitted},
                              after=inputs.after, open_partitions=True, parent=self)
        self.outputs = AcceptanceOutputs(canary=canary)
        self.register_outputs({})
