"""Pure renderers of the health layer: a node's health-check config and the slurm.conf lines."""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

from ...config.hosts import NodeSpec
from .config import SPARE_WEIGHT, HealthLayer

HEALTHCHECK = "/opt/gpu-fleet/bin/gpu-fleet-healthcheck"
REBOOT = "/opt/gpu-fleet/bin/gpu-fleet-reboot"
CONFIG = "/etc/gpu-fleet/health.json"
#: the last result (refresh reads it): in /run, so a result from before a reboot proves nothing
RESULT = "/run/gpu-fleet-health/last.json"
#: the reboot count survives the reboots it counts
STATE_DIR = "/var/lib/gpu-fleet/health"
EVENT_LOG = "/var/log/gpu-fleet/health.jsonl"
#: the guard's status (the guards layer's render.STATUS) and how old it may be
GUARD_STATUS = "/run/gpu-fleet-guard/status.json"
GUARD_UNIT = "/etc/systemd/system/gpu-fleet-guard.service"
#: who drained a node, by the start of its reason (the guard's own prefix is the guards layer's)
OWN_REASON = "gpu-fleet health:"
GUARD_REASON = "gpu-fleet guard:"
QUARANTINED = f"{OWN_REASON} quarantined"


def render_config(h: HealthLayer, node: NodeSpec, *, xids: Sequence[int], uuids: Sequence[str],
                  stores: Sequence[Mapping[str, Any]], pynvml_dir: str, guard_interval_s: Optional[int]) -> str:
    """The node's config (JSON). `uuids`: what the GPU layer recorded on the node (empty: only
    the count is checked); `stores`: {path, source, fstypes} of each store the node mounts;
    `guard_interval_s`: the guard's sampling interval (None: no guard to check)."""
    doc = {
        "node": node.name, "interval_s": h.interval_s, "gpus": node.gpus.count if node.gpus else 0,
        "uuids": sorted(uuids),
        "xids": sorted(xids), "kernel_log": h.kernel_log, "pynvml_dir": pynvml_dir,
        "stores": [dict(s) for s in stores],
        "guard_status": GUARD_STATUS if guard_interval_s else None,
        "guard_unit": GUARD_UNIT, "guard_max_age_s": 3 * guard_interval_s + 10 if guard_interval_s else None,
        "own_reason": OWN_REASON, "guard_reason": GUARD_REASON,
        "reboot_on": list(h.reboot_on), "max_reboots_per_day": h.max_reboots_per_day,
        "quarantine_reservation": h.quarantine_reservation,
        "result_file": RESULT, "state_dir": STATE_DIR, "event_log": EVENT_LOG,
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def slurm_lines(h: HealthLayer) -> tuple[str, ...]:
    """slurm.conf: slurmd runs the check at start and each interval in every state (ANY: a drained
    node is checked too, which is how it comes back); Slurm's own reboot, and how long slurmctld
    waits for a rebooting node to register before it marks it DOWN."""
    return (f"HealthCheckProgram={HEALTHCHECK}", f"HealthCheckInterval={h.interval_s}",
            f"HealthCheckNodeState={h.node_state}", f"RebootProgram={REBOOT}",
            f"ResumeTimeout={h.reboot_timeout_s}")


def spare_weights(h: HealthLayer) -> dict[str, int]:
    """slurm.conf: each spare's node Weight (the scheduler and a new reservation take it last)."""
    return {n: SPARE_WEIGHT for n in h.spares.nodes} if h.spares else {}
