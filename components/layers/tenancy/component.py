"""The tenancy layer: teams' QOS, accounts and members as accounting objects in slurmdbd.

Two `SlurmAccounting` resources on the controller (one read each for all their objects, each
field diffed, drift restored by `up`):
- `tenancy-ops`, once slurmdbd serves and the cluster is registered (the accounting layer's
  `ready`) and before slurmctld starts: slurm.conf enforces associations, so the canary user
  needs its association (under the ops account) before its first job;
- `tenancy-accounting`, the teams' QOS, accounts and members, once slurmctld runs: their GPU
  limits name TRES (gres/gpu, gres/gpu:<type>) that slurmdbd knows only after slurmctld
  registered its AccountingStorageTRES ("no TRES known by type gres/gpu" before).
The scheduler settings (render.scheduling) reach slurm.conf through the Slurm layer.

Rollback removes the QOS, accounts and associations it created; jobs' history stays in
accounting (sacctmgr marks an association with history deleted, it keeps the jobs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pulumi

from ...providers.sacct import SlurmAccounting
from ...site import Site
from .config import TenancyLayer
from .render import ENFORCE, leaf_feature, ops_objects, team_objects, team_tres


@dataclass(frozen=True, kw_only=True)
class TenancyInputs:
    site: Site
    tenancy: TenancyLayer
    cluster_name: str
    canary_user: str
    #: slurmdbd serving and the cluster registered (the accounting layer's `ready`)
    dbd_ready: Sequence[pulumi.Resource]
    #: slurmctld running with the rendered config (the Slurm layer's `reconfigured`)
    slurmctld: Sequence[pulumi.Resource]


@dataclass(frozen=True)
class TenancyOutputs:
    #: the ops account and the canary's association: what slurmctld waits on
    ops: pulumi.Resource
    #: the teams' objects: what the final acceptance waits on
    objects: pulumi.Resource
    summary: dict

    def exports(self) -> dict[str, pulumi.Input]:
        return {"tenancy": self.summary}


class Tenancy(pulumi.ComponentResource):
    """Teams with guaranteed GPUs, borrowing with reclaim, the fleet's own ops account."""

    def __init__(self, name: str, inputs: TenancyInputs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:tenancy:Tenancy", name, None, opts)
        t = inputs.tenancy
        conn = inputs.site.conn(inputs.site.hosts.controller)
        ops = SlurmAccounting(
            "tenancy-ops", conn=conn, cluster=inputs.cluster_name, members=ops_objects(t, inputs.canary_user),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(inputs.dbd_ready)))
        objects = SlurmAccounting(
            "tenancy-accounting", conn=conn, cluster=inputs.cluster_name, members=team_objects(t),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ops, *inputs.slurmctld]))
        o = t.opportunistic
        self.outputs = TenancyOutputs(ops=ops, objects=objects, summary={
            "enforce": ENFORCE, "preemptMode": t.preempt_mode, "opsAccount": t.ops_account,
            "teams": {team.name: {"qos": team.name, "grpTRES": team_tres(team.guaranteed),
                                  "fairshare": team.fairshare, "members": list(team.members)} for team in t.teams},
            "opportunistic": None if o is None else {
                "qos": o.qos, "maxGpusPerTeam": o.max_gpus_per_team, "graceS": o.grace_s, "exemptS": o.exempt_s,
                "preemptMode": o.preempt_mode.upper()},
            "leaves": {sw.name: {"feature": leaf_feature(sw.name), "nodes": list(sw.nodes)} for sw in t.switches},
        })
        self.register_outputs({})
