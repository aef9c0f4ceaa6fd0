"""The node health layer: a health check slurmd runs on every Slurm node (seed 001's self-healing,
seed 004's "resume only when proven well").

Per node, before the Slurm layer starts slurmd with `HealthCheckProgram` (Fleet hands these to the
Slurm layer as the node's prerequisites):
- `Payload` the check (healthcheck.py) and Slurm's RebootProgram (reboot.sh), by SHA-256;
- `File` the node's config /etc/gpu-fleet/health.json (render.py): the GPU UUIDs the GPU layer
  recorded, the stores as the storage layer mounts them, the guard's status, the reboot policy.
After the Slurm layer (and the guards):
- `CommandWithVerify` per node: slurmd ran the check with the config on disk (its last result is
  fresh and names the config's SHA-256), proving the loop runs, whatever the node's health;
- `HealthReport` on the controller: every node's Slurm state and reason and its last result,
  read again on refresh (the stack output `health`).

After the acceptance (its nodes proven before they are lent):
- `LentReservation` per reservation of `spares` (reservation.py), and the stack output `spares`.

The slurm.conf lines (render.slurm_lines, and the spares' Weight) reach the Slurm layer through
`Fleet`. Rollback removes the check, its config and its reboot program, and the lent reservations
it created; the nodes it drained stay drained, the quarantine reservation stays (an admin lifts
it), the event log and reboot counts stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import pulumi

from ...providers import CommandWithVerify, File
from ...providers.payload import Payload, sha256_file
from ...config.hosts import NodeSpec
from ...site import Site
from .config import HealthLayer, Spares
from .render import CONFIG, HEALTHCHECK, REBOOT, RESULT, STATE_DIR, render_config
from .report import HealthReport
from .reservation import LentReservation

ONHOST = Path(__file__).with_name("onhost")
SOURCE = ONHOST / "healthcheck.py"
REBOOT_SOURCE = ONHOST / "reboot.sh"


@dataclass(frozen=True, kw_only=True)
class HealthInputs:
    site: Site
    health: HealthLayer
    pynvml_dir: str
    #: the GPU layer's verdicts (node -> {"uuids": [...], ...}); None without it
    gpu_verdicts: Optional[pulumi.Output[dict]]
    #: each store a node mounts: {path, source, fstypes}
    stores: Sequence[Mapping[str, Any]]
    #: the XIDs that mean hardware (the guards' list)
    xids: Sequence[int]
    #: the guard's interval (None: no guards)
    guard_interval_s: Optional[int]
    #: node -> what its files wait on (the GPU layer, a K3s hand-over)
    node_after: Mapping[str, Sequence[pulumi.Resource]]


@dataclass(frozen=True)
class HealthOutputs:
    #: node -> its check's program, reboot program and config: slurmd must not start without them
    files: dict[str, list[pulumi.Resource]]
    health: HealthLayer

    def exports(self) -> dict[str, pulumi.Input]:
        return {}


class NodeHealth(pulumi.ComponentResource):
    """The health check's files on every Slurm node (before slurmd runs it)."""

    def __init__(self, name: str, inputs: HealthInputs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:health:NodeHealth", name, None, opts)
        site, h = inputs.site, inputs.health
        files: dict[str, list[pulumi.Resource]] = {}
        for n in site.slurm_nodes():
            conn = site.conn(n)
            after = pulumi.ResourceOptions(parent=self, depends_on=list(inputs.node_after.get(n.name, ())))
            verdicts = inputs.gpu_verdicts if inputs.gpu_verdicts is not None else pulumi.Output.from_input({})

            def text_of(v: dict, n: NodeSpec = n) -> str:
                return render_config(h, n, xids=inputs.xids, uuids=((v or {}).get(n.name) or {}).get("uuids") or [],
                                     stores=inputs.stores, pynvml_dir=inputs.pynvml_dir,
                                     guard_interval_s=inputs.guard_interval_s)
            text = verdicts.apply(text_of)
            files[n.name] = [
                Payload(f"{n.name}-healthcheck", conn=conn, path=HEALTHCHECK, source=SOURCE, mode="0755", opts=after),
                Payload(f"{n.name}-reboot-program", conn=conn, path=REBOOT, source=REBOOT_SOURCE, mode="0755",
                        opts=after),
                File(f"{n.name}-health-config", conn=conn, path=CONFIG, content=text, mode="0644", opts=after)]
        self.outputs = HealthOutputs(files=files, health=h)
        self.register_outputs({})


@dataclass(frozen=True)
class HealthCheckOutputs:
    checks: dict
    report: HealthReport

    def exports(self) -> dict[str, pulumi.Input]:
        return {"health": self.report.health}


class HealthChecks(pulumi.ComponentResource):
    """Proof that slurmd runs the check on every node, and the fleet's health as Slurm sees it."""

    def __init__(self, name: str, site: Site, files: HealthOutputs, after: Sequence[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:health:HealthChecks", name, None, opts)
        h = files.health
        check = ["python3", HEALTHCHECK, "--check"]
        # slurmd runs it each interval: a fresh result appears within one
        wait = str(h.interval_s + 30)
        checks = {}
        code = sha256_file(SOURCE)[:16]
        for n in site.slurm_nodes():
            checks[n.name] = CommandWithVerify(
                f"{n.name}-health-check", conn=site.conn(n), create=[*check, "--wait-s", wait], verify=check,
                triggers={"check": code},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*files.files[n.name], *after]))
        report = HealthReport(
            "health-report", conn=site.conn(site.hosts.controller),
            nodes=[site.conn(n) for n in site.slurm_nodes()], result_file=RESULT,
            reboots_file=f"{STATE_DIR}/reboots.json", max_parallel=site.ssh.max_parallel,
            triggers={"check": code, "interval": h.interval_s},
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(checks.values())))
        self.outputs = HealthCheckOutputs(checks=checks, report=report)
        self.register_outputs({})


@dataclass(frozen=True)
class SpareOutputs:
    reservations: dict[str, LentReservation]

    def exports(self) -> dict[str, pulumi.Input]:
        out = {name: pulumi.Output.all(r.nodes, r.lent_from, r.standing_in).apply(
            lambda v: {"nodes": v[0], "lent_from": v[1], "standing_in": v[2]})
            for name, r in self.reservations.items()}
        return {"spares": out}


class HealthSpares(pulumi.ComponentResource):
    """The reservations the spares stand in for, once the acceptance proved the nodes."""

    def __init__(self, name: str, site: Site, spares: Spares, after: Sequence[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:health:HealthSpares", name, None, opts)
        ctl = site.conn(site.hosts.controller)
        self.outputs = SpareOutputs(reservations={r.name: LentReservation(
            f"reservation-{r.name}", conn=ctl, reservation=r.name, partition=r.partition, node_count=r.node_count,
            users=list(r.users), accounts=list(r.accounts), spares=list(spares.nodes),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(after))) for r in spares.reservations})
        self.register_outputs({})
