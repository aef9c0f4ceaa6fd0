"""The acceptance layer: the fleet's final acceptance, the only thing that opens partitions.

Once everything Slurm serves with is in place (the Slurm layer's reconfigure and, with
accounting, the accounting verification; the guards, the model view, the web check), every
admitted node runs an exclusive job of its own, all at once, that proves from inside the job
what the seed's criteria ask of a node (provider.py, node_checks.py), then one job spans every
node that passed. Nodes that fail are drained and left out; the partitions open when at least
`min_nodes` passed. The verdict is the stack output `acceptance` and a report beside the state
(`.state/artifacts/acceptance/<stack>.html` and `.json`) with the seven criteria.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import pulumi
from pulumi.dynamic import Resource

from ...kit import sha256
from ..slurm.canary import JobSpec
from ..slurm.render import ACCEPTANCE_PARTITION
from .config import AcceptanceLayer
from .provider import _FLEET_JOBS, _NODE_JOB, _STEP, FleetAcceptanceProvider, node_hash_input
from .restart import reopen_unit

REPORT_DIR = (".state", "artifacts", "acceptance")


@dataclass(frozen=True, kw_only=True)
class AcceptanceInputs:
    #: how jobs run (site, the Slurm layer's canary user and partitions, acceptance's timeout,
    #: the store's paths), shared with the Slurm layer's canary-first gate
    job: JobSpec
    acceptance: AcceptanceLayer
    admitted: pulumi.Output[list]
    #: admission's refusals (node -> why): criterion 1 is not met while one is out
    refused: pulumi.Output[dict]
    #: what the jobs must come after: the Slurm layer's reconfigure, accounting's check, ...
    after: Sequence[pulumi.Resource]
    #: hashes of what the Slurm layer applied; a change judges every node again
    triggers: Mapping[str, pulumi.Input]
    #: slurm.gpu_device_prefix and slurm.release.version
    device_prefix: str
    slurm_version: str
    #: the GPU layer's pynvml and per-node verdicts (UUIDs by index); None without the layer
    pynvml_dir: Optional[str] = None
    gpu_verdicts: Optional[pulumi.Output[dict]] = None
    #: what the web layer's check saw (None without the layer); whether K3s nodes were retired
    web_seen: Optional[pulumi.Output[Any]] = None
    k3s: bool = False
    workload: bool = False


@dataclass(frozen=True)
class AcceptanceOutputs:
    #: None when acceptance is off or no node is in a partition
    fleet: Optional[FleetAcceptance]
    #: criterion 7 as the workload layer's run judged it, after this report (Fleet sets it)
    workload_row: Optional[pulumi.Output[dict]] = None

    def exports(self) -> dict[str, pulumi.Input]:
        """`acceptance`: per node passed, job ids and each check with what was seen; the
        criteria's statuses (the seventh the workload's, where the stack runs one)."""
        f = self.fleet
        if f is None:
            return {}
        later = self.workload_row if self.workload_row is not None else pulumi.Output.from_input(None)

        def criteria(rows: list, row: Optional[dict]) -> dict[str, str]:
            return {str(int(c["id"])): (row["status"] if row and int(c["id"]) == row["id"] else c["status"])
                    for c in rows or []}
        return {"acceptance": pulumi.Output.all(f.results, f.fleet_job, f.accepted, f.failed, f.criteria, later).apply(
            lambda t: {"accepted": t[2], "failed": t[3],
                       "nodes": {n: {"passed": r["passed"], "jobs": r["jobs"],
                                     "checks": {c["name"]: {"passed": c["passed"], "seen": c["seen"]}
                                                for c in r["checks"]}} for n, r in (t[0] or {}).items()},
                       "fleetJob": t[1], "criteria": criteria(t[4], t[5])})}


class FleetAcceptance(Resource, module="acceptance", name="FleetAcceptance"):
    """Every admitted node's job, the all-node job, the verdict (FleetAcceptanceProvider)."""

    results: pulumi.Output[dict]
    fleet_job: pulumi.Output[Optional[dict]]
    accepted: pulumi.Output[list]
    failed: pulumi.Output[dict]
    criteria: pulumi.Output[list]

    def __init__(self, name: str, props: dict, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(FleetAcceptanceProvider(), name,
                         {**props, "results": None, "fleet_job": None, "accepted": None, "failed": None,
                          "criteria": None}, opts)


class Acceptance(pulumi.ComponentResource):
    """The final acceptance of a stack."""

    def __init__(self, name: str, inputs: AcceptanceInputs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-fleet:acceptance:Acceptance", name, None, opts)
        spec, site, a = inputs.job, inputs.job.site, inputs.acceptance
        fleet = None
        if a.enabled and site.slurm_nodes():
            by_name = {n.name: n for n in site.nodes}
            #: how every node is judged: the props the provider reads, and part of each node's hash
            judging = {"timeout_s": spec.timeout_s, "job_mem_mib": a.job_mem_mib,
                       "device_prefix": inputs.device_prefix, "pynvml_dir": inputs.pynvml_dir or "",
                       "job_root": spec.paths.job_root, "readonly_probe": spec.paths.readonly_probe or "",
                       "marker": spec.paths.marker or "", "accounting": spec.accounting,
                       "deep_checks": [c.model_dump() for c in a.deep_checks]}
            checks = {**judging, "scripts": sha256(_FLEET_JOBS + _NODE_JOB + _STEP, 16)}

            def nodes(t: list) -> dict[str, dict]:
                admitted, verdicts, applied = t[0], t[1] or {}, t[2] or {}
                out = {}
                for name in admitted:
                    n = by_name[name]
                    g = n.gpus
                    node = {"gpus": g.count if g else 0, "gpu_type": g.type if g else "",
                            "model": g.model if g else "", "cpus": n.cpus}
                    uuids = list((verdicts.get(name) or {}).get("uuids") or [])
                    out[name] = {**node, "uuids": uuids,
                                 "hash": sha256(node_hash_input(node, uuids, applied, checks), 16)}
                return out

            verdicts = inputs.gpu_verdicts if inputs.gpu_verdicts is not None else pulumi.Output.from_input({})
            ctl = site.conn(site.hosts.controller)
            # what the partitions' opening survives: a restart of slurmctld (restart.py)
            reopen = reopen_unit(ctl, site.hosts.controller.name, list(inputs.after), self)
            fleet = FleetAcceptance("fleet-acceptance", {
                "conn": ctl,
                "node_conns": inputs.admitted.apply(lambda ns: {n: site.conn(by_name[n]) for n in ns}),
                "admitted": inputs.admitted,
                "nodes": pulumi.Output.all(inputs.admitted, verdicts,
                                           pulumi.Output.from_input(dict(inputs.triggers))).apply(nodes),
                "user": spec.canary_user, "partition": ACCEPTANCE_PARTITION, "partitions": list(spec.partitions),
                "min_nodes": a.min_nodes, **judging,
                "refused": inputs.refused, "k3s": inputs.k3s, "slurm": inputs.slurm_version,
                **({"workload": True} if inputs.workload else {}),
                "web": (inputs.web_seen.apply(lambda w: f"the web layer's check passed: {w}"[:400])
                        if inputs.web_seen is not None else None),
                "stack": pulumi.get_stack(), "report_dir": str(site.root.joinpath(*REPORT_DIR)),
            }, pulumi.ResourceOptions(parent=self, depends_on=[*inputs.after, reopen]))
        self.outputs = AcceptanceOutputs(fleet=fleet)
        self.register_outputs({})
