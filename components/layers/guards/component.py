"""The guards layer: a guard daemon on every GPU node in Slurm (seed 004, seed 001's XIDs).

Per node, after the Slurm layer has the node's slurmd up (the guard drains through slurmctld):

- `Payload` the guard (guard.py, by SHA-256) at /opt/gpu-fleet/bin/gpu-fleet-guard;
- `File` its config /etc/gpu-fleet/guard.json (render.py);
- `SystemdUnit` gpu-fleet-guard.service, restarted when the guard or its config changes;
- `CommandWithVerify` the check: the unit's main process reports a fresh sample taken with the
  config on disk and a live kernel-log reader (`gpu-fleet-guard --check`): what runs, not what
  the unit file says. On refresh it reads the same, and fails the rollout when it does not hold.

Rollback stops and removes the guard, its unit and config; the event log stays, and the nodes it
drained stay drained (it never resumes a node; an admin does).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pulumi

from ...kit import sha256
from ...providers import CommandWithVerify, File, SystemdUnit
from ...providers.payload import Payload, sha256_file
from ...site import Site
from .config import GuardsLayer
from .render import CONFIG, EVENT_LOG, GUARD, STATUS, UNIT, render_config, render_unit

SOURCE = Path(__file__).with_name("onhost") / "guard.py"


@dataclass(frozen=True, kw_only=True)
class GuardsInputs:
    site: Site
    guards: GuardsLayer
    #: where the GPU runtime layer put the pinned pynvml (gpu_runtime.pynvml_dir): the guard imports it
    pynvml_dir: str
    #: what the guards wait on: the Slurm layer's daemons (a drain needs slurmctld and the node)
    after: Sequence[pulumi.Resource]


@dataclass(frozen=True)
class GuardsOutputs:
    #: node -> its guard's check
    checks: dict
    #: what the guards do, for the stack output `guards`
    summary: dict

    def exports(self) -> dict[str, pulumi.Input]:
        return {"guards": self.summary}


class Guards(pulumi.ComponentResource):
    """The node guards: drain a node on GPU heat soak, a hardware XID or NVML gone silent."""

    def __init__(self, name: str, inputs: GuardsInputs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:guards:Guards", name, None, opts)
        site, g = inputs.site, inputs.guards
        unit = render_unit(g, inputs.pynvml_dir)
        guard_sha = sha256_file(SOURCE)[:16]
        after = pulumi.ResourceOptions(parent=self, depends_on=list(inputs.after))
        check = ["python3", GUARD, "--config", CONFIG, "--check"]
        wait = str(max(30, 3 * g.interval_s + 10))
        checks = {}
        for n in (n for n in site.slurm_nodes() if n.gpus):
            conn = site.conn(n)
            guard = Payload(f"{n.name}-guard", conn=conn, path=GUARD, source=SOURCE, mode="0755", opts=after)
            text = render_config(g, n)
            conf = File(f"{n.name}-guard-config", conn=conn, path=CONFIG, content=text, mode="0644", opts=after)
            # what restarts the guard: its code or its config changed (the unit's own text is
            # the SystemdUnit's content)
            triggers = {"guard": guard_sha, "config": sha256(text, 16)}
            service = SystemdUnit(f"{n.name}-guard-unit", conn=conn, unit=UNIT, content=unit, triggers=triggers,
                                  opts=pulumi.ResourceOptions(parent=self, depends_on=[guard, conf]))
            checks[n.name] = CommandWithVerify(
                f"{n.name}-guard-check", conn=conn, create=[*check, "--wait-s", wait], verify=check,
                triggers={**triggers, "unit": sha256(unit, 16)},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[service]))
        self.outputs = GuardsOutputs(checks=checks, summary={
            "nodes": sorted(checks), "dry_run": g.dry_run, "interval_s": g.interval_s,
            "drain_on": {"soak": f"{g.thermal.soak_c} C for {g.thermal.soak_s} s", "hard_c": g.thermal.hard_c,
                         "xids": list(g.drain_xids), "nvml_silent": True},
            "event_log": EVENT_LOG, "status": STATUS})
        self.register_outputs({})
