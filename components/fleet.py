"""The root component and the one place layers are wired.

Each layer is a direct child of the Fleet, built from a typed inputs object and
handing on a typed outputs object; no layer constructs another. The seed's
order: storage, GPU runtime, K3s retirement, Slurm, accounting, tenancy, web, guards, model
snapshot, acceptance (the layers not built yet are refused by the config, so
they never appear here as silent no-ops). Admission (components/admission.py)
turns the gating layers' verdicts into the nodes Slurm takes.

One hand-off runs against the order of construction: slurmctld must wait for
accounting (slurmdbd serving, the ClusterID adopted) while accounting builds on
the Slurm layer's controller base. Slurm takes that gate as a deferred Output
that Fleet resolves once the accounting layer exists (empty without it); the
resource graph itself has no cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Protocol

import pulumi

from .admission import Admission, admit
from .config.fleet import FleetConfig
from .inventory import Inventory, fleet_summary
from .site import Site
from .layers.acceptance.component import Acceptance, AcceptanceInputs
from .layers.slurm.canary import JobPaths, JobSpec
from .layers.slurm.scheduling import NO_SCHEDULING, Scheduling
from .layers.accounting.component import JWT_KEY, RESTD_SOCKET_DIR, Accounting, AccountingInputs
from .layers.gpu_runtime.component import GpuRuntime, GpuRuntimeInputs
from .layers.guards.component import Guards, GuardsInputs
from .layers.health.component import HealthChecks, HealthInputs, HealthSpares, NodeHealth
from .layers.health.render import slurm_lines as health_lines, spare_weights
from .layers.k3s_retirement.component import K3sRetirement, K3sRetirementInputs
from .layers.model_snapshot.component import ModelSnapshot, ModelSnapshotInputs
from .layers.slurm.component import SlurmCluster, SlurmInputs
from .layers.storage.component import Storage, StorageInputs
from .layers.tenancy.component import Tenancy, TenancyInputs
from .layers.tenancy.render import scheduling
from .layers.web.component import Web, WebInputs
from .layers.workload.component import Workload, WorkloadFiles, WorkloadFilesInputs, WorkloadInputs, packed_runtime
from .layers.workload.render import slurm_lines as workload_lines


class Exports(Protocol):
    """What every layer's outputs (and the admission) hand to the stack's outputs."""

    def exports(self) -> dict[str, pulumi.Input]: ...


@dataclass(frozen=True)
class FleetSecrets:
    """The stack's Pulumi secrets each layer needs (None where the layer is off)."""

    munge_key: Optional[pulumi.Output[str]] = None
    db_password: Optional[pulumi.Output[str]] = None
    jwt_key: Optional[pulumi.Output[str]] = None
    #: the hub token, where the model's repository needs one
    hf_token: Optional[pulumi.Output[str]] = None


class Fleet(pulumi.ComponentResource):
    """Brings the configured fleet up layer by layer; `pulumi destroy` unwinds it in reverse."""

    def __init__(self, name: str, cfg: FleetConfig, root: Optional[Path] = None,
                 secrets: FleetSecrets = FleetSecrets(),
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:index:Fleet", name, None, opts)
        root = root or Path.cwd()
        child = pulumi.ResourceOptions(parent=self)
        self.cfg = cfg
        site = Site(hosts=cfg.hosts, nodes=tuple(cfg.nodes), ssh=cfg.ssh, root=root,
                    slurm_members=frozenset(m for p in cfg.slurm.partitions for m in p.nodes))
        # packed (or found packed) before any resource is registered: a missing tool fails here
        runtime = packed_runtime(root, cfg.workload) if cfg.workload.enabled else None
        self.inventory = Inventory(cfg, child)
        self.summary = fleet_summary(cfg)

        self.storage = None
        gates = []
        job_paths = JobPaths()
        if cfg.storage.enabled:
            self.storage = Storage("storage", StorageInputs(
                site=site, storage=cfg.storage, models_writable=cfg.model_snapshot.enabled), child).outputs
            gates.append(self.storage.gate)
            job_paths = self.storage.job_paths
        # K3s nodes: handed over once stopped with a sealed bundle; what the GPU and Slurm layers
        # put on a retired node waits on its stop (and goes before K3s comes back on rollback)
        self.k3s = None
        node_after: dict[str, list[pulumi.Resource]] = {}
        if cfg.k3s_retirement.enabled:
            self.k3s = K3sRetirement("k3s-retirement", K3sRetirementInputs(
                site=site, k3s_retirement=cfg.k3s_retirement, gpu_device_prefix=cfg.slurm.gpu_device_prefix),
                child).outputs
            gates.append(self.k3s.gate)
            node_after = {n: [r] for n, r in self.k3s.handed_over.items()}
        self.gpu = None
        if cfg.gpu_runtime.enabled:
            self.gpu = GpuRuntime("gpu", GpuRuntimeInputs(
                site=site, gpu_runtime=cfg.gpu_runtime, node_after=node_after), child).outputs
            gates.append(self.gpu.gate)
        self.admission: Admission = admit(cfg, gates)
        # the model downloads beside the Slurm rollout (it needs only the store); the final
        # acceptance reads its marker, the Slurm layer's canary-first gate does not wait for it
        self.model = None
        final_paths = job_paths
        if cfg.model_snapshot.enabled and self.storage is not None:
            self.model = ModelSnapshot("model-snapshot", ModelSnapshotInputs(
                site=site, model=cfg.model_snapshot, storage=self.storage, token=secrets.hf_token), child).outputs
            final_paths = self.model.job_paths

        self.slurm = self.accounting = self.acceptance = self.web = self.guards = self.tenancy = None
        self.health = self.spares = self.workload = None
        if not (cfg.slurm.enabled and secrets.munge_key is not None):
            self.register_outputs({"summary": self.summary})
            return
        accounting = (cfg.accounting.enabled and secrets.db_password is not None
                      and secrets.jwt_key is not None)
        controller_gate: pulumi.Output[list[pulumi.Resource]]
        hand_over: Callable[[pulumi.Output[list[pulumi.Resource]]], None]
        controller_gate, hand_over = pulumi.deferred_output()
        # the health check's files are on a node before its slurmd is started to run them
        health_files = None
        slurm_node_after = node_after
        sched = scheduling(cfg.tenancy, cfg.slurm_nodes()) if accounting else NO_SCHEDULING
        if cfg.health.enabled:
            health_files = NodeHealth("health", HealthInputs(
                site=site, health=cfg.health, pynvml_dir=cfg.gpu_runtime.pynvml_dir,
                gpu_verdicts=self.gpu.verdicts if self.gpu is not None else None,
                stores=self.storage.client_mounts if self.storage is not None else (),
                xids=cfg.guards.drain_xids, guard_interval_s=cfg.guards.interval_s if cfg.guards.enabled else None,
                node_after=node_after), child).outputs
            slurm_node_after = {n: [*node_after.get(n, ()), *rs] for n, rs in health_files.files.items()}
            sched = sched + Scheduling(title="node health (gpu-fleet:health)", lines=health_lines(cfg.health),
                                       weights=spare_weights(cfg.health))
        workload_files = None
        if cfg.workload.enabled:
            # the jobs' scripts and the Epilog are on a node before its slurmd names them
            workload_files = WorkloadFiles("workload-files", WorkloadFilesInputs(
                site=site, workload=cfg.workload, node_after=node_after), child).outputs
            slurm_node_after = {n: [*slurm_node_after.get(n, ()), *rs] for n, rs in workload_files.files.items()}
            sched = sched + Scheduling(title="workload (gpu-fleet:workload)", lines=workload_lines())
        job = JobSpec(site=site, canary_user=cfg.slurm.canary_user,
                      partitions=tuple(p.name for p in cfg.slurm.partitions),
                      timeout_s=cfg.acceptance.job_timeout_s, accounting=accounting, paths=job_paths)
        self.slurm = SlurmCluster("slurm", SlurmInputs(
            site=site, slurm=cfg.slurm, acceptance=cfg.acceptance.enabled, munge_key=secrets.munge_key,
            admission=self.admission, controller_gate=controller_gate, accounting=accounting, job=job,
            node_after=slurm_node_after, scheduling=sched), child).outputs
        after = [self.slurm.reconfigured]
        if accounting and secrets.db_password is not None and secrets.jwt_key is not None:  # (implied: typed)
            self.accounting = Accounting("accounting", AccountingInputs(
                site=site, accounting=cfg.accounting, cluster_name=cfg.slurm.cluster_name,
                slurm_debian_version=cfg.slurm.release.debian_version, db_password=secrets.db_password,
                jwt_key=secrets.jwt_key, controller_base=self.slurm.controller_base,
                slurmctld=self.slurm.slurmctld), child).outputs
            gate: list[pulumi.Resource] = [self.accounting.ready]
            if cfg.tenancy.enabled:
                # associations are enforced: they exist before slurmctld takes a job
                self.tenancy = Tenancy("tenancy", TenancyInputs(
                    site=site, tenancy=cfg.tenancy, cluster_name=cfg.slurm.cluster_name,
                    canary_user=cfg.slurm.canary_user, dbd_ready=[self.accounting.ready],
                    slurmctld=[self.slurm.reconfigured]), child).outputs
                gate.append(self.tenancy.ops)
                after.append(self.tenancy.objects)
            hand_over(pulumi.Output.from_input(gate))
            after.append(self.accounting.checked)
            if cfg.web.enabled:
                self.web = Web("web", WebInputs(
                    site=site, web=cfg.web, cluster_name=cfg.slurm.cluster_name, restd_socket_dir=RESTD_SOCKET_DIR,
                    jwt_key=JWT_KEY,
                    after=[self.accounting.checked]), child).outputs
        else:
            hand_over(pulumi.Output.from_input([]))
        if cfg.guards.enabled:
            # each GPU node's guard, once the node's slurmd has registered (it drains through slurmctld)
            self.guards = Guards("guards", GuardsInputs(
                site=site, guards=cfg.guards, pynvml_dir=cfg.gpu_runtime.pynvml_dir,
                after=[self.slurm.reconfigured]), child).outputs
            after.extend(self.guards.checks.values())  # the partitions open on guarded nodes only
        if health_files is not None:
            # slurmd runs the check on every node (after the guards: it checks them too)
            self.health = HealthChecks("health-checks", site, health_files, after=list(after), opts=child).outputs
            after.append(self.health.report)
        if self.model is not None:
            after.append(self.model.view)
        if self.web is not None:
            after.append(self.web.check)
        self.acceptance = Acceptance("acceptance", AcceptanceInputs(
            job=job.at(final_paths), acceptance=cfg.acceptance, admitted=self.slurm.admitted,
            refused=self.admission.refused, after=after, triggers=self.slurm.triggers,
            device_prefix=cfg.slurm.gpu_device_prefix, slurm_version=cfg.slurm.release.version,
            pynvml_dir=cfg.gpu_runtime.pynvml_dir if self.gpu is not None else None,
            gpu_verdicts=self.gpu.verdicts if self.gpu is not None else None,
            web_seen=self.web.check.seen if self.web is not None else None,
            k3s=self.k3s is not None, workload=cfg.workload.enabled), child).outputs
        if cfg.health.enabled and cfg.health.spares is not None:
            # lent once the acceptance proved the nodes (and opened the partitions they draw from)
            self.spares = HealthSpares("health-spares", site, cfg.health.spares,
                                       after=[self.acceptance.fleet] if self.acceptance.fleet else after,
                                       opts=child).outputs
        if workload_files is not None and runtime is not None and self.storage is not None:
            # the seed's seventh criterion, on the fleet the acceptance proved
            self.workload = Workload("workload", WorkloadInputs(
                site=site, workload=cfg.workload, data=cfg.storage.data, runtime=runtime,
                after=[*([self.acceptance.fleet] if self.acceptance.fleet else after), self.storage.clients,
                       *(r for rs in workload_files.files.values() for r in rs)],
                accounting=accounting, canary_user=cfg.slurm.canary_user,
                triggers=self.slurm.triggers, report=cfg.acceptance.enabled), child).outputs
            # the acceptance's stack output judges criterion 7 by the workload's run
            self.acceptance = replace(self.acceptance, workload_row=self.workload.row())
        self.register_outputs({"summary": self.summary})

    def built(self) -> list[Exports]:
        """The admission and every layer built, in the order the stack exports them."""
        return [x for x in (self.admission, self.storage, self.gpu, self.model, self.k3s, self.slurm,
                            self.accounting, self.tenancy, self.web, self.guards, self.health, self.acceptance,
                            self.spares, self.workload)
                if x is not None]
