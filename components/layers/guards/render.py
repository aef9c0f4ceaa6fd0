"""Pure renderers of the guards layer: a node's guard config and the guard's systemd unit."""

from __future__ import annotations

import json

from ...config.hosts import NodeSpec
from .config import GuardsLayer

GUARD = "/opt/gpu-fleet/bin/gpu-fleet-guard"
CONFIG = "/etc/gpu-fleet/guard.json"
UNIT = "gpu-fleet-guard.service"
#: under systemd's RuntimeDirectory (removed when the guard stops: a stale status proves nothing)
RUNTIME_DIR = "gpu-fleet-guard"
STATUS = f"/run/{RUNTIME_DIR}/status.json"
#: under systemd's LogsDirectory: kept when the guard stops and when the layer is rolled back
LOGS_DIR = "gpu-fleet"
EVENT_LOG = f"/var/log/{LOGS_DIR}/guard.jsonl"


def render_config(g: GuardsLayer, node: NodeSpec) -> str:
    """The node's guard config (JSON; its SHA-256 is what the running guard reports). `gpus`: how
    many the stack declares on the node; NVML seeing fewer drains it."""
    spec = node.gpus
    doc = {"node": node.name, "gpus": spec.count if spec else None, "interval_s": g.interval_s, "dry_run": g.dry_run,
           "thermal": {"soak_c": g.thermal.soak_c, "soak_s": g.thermal.soak_s, "hard_c": g.thermal.hard_c},
           "drain_xids": list(g.drain_xids), "kernel_log": g.kernel_log,
           "event_log": EVENT_LOG, "status_file": STATUS, "scontrol": "scontrol",
           "memory": None if g.memory is None else g.memory.model_dump()}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def render_unit(g: GuardsLayer, pynvml_dir: str) -> str:
    """Root (Slurm takes `scontrol update` only from root or SlurmUser) without capabilities but
    CAP_KILL when the memory guard is on (it stops a job's process, another user's): it reads
    NVML's device files (so no PrivateDevices), the journal, /proc, its config; it writes only its
    status and its event log."""
    caps = "CAP_KILL" if g.memory is not None else ""
    return (
        "[Unit]\nDescription=gpu-fleet guard: drains this node on GPU heat soak or a hardware XID\n"
        "After=network-online.target slurmd.service\n\n"
        "[Service]\nType=simple\n"
        f"Environment=PYTHONPATH={pynvml_dir} PYTHONDONTWRITEBYTECODE=1\n"
        f"ExecStart=/usr/bin/python3 {GUARD} --config {CONFIG}\n"
        "Restart=always\nRestartSec=5\n"
        f"RuntimeDirectory={RUNTIME_DIR}\nLogsDirectory={LOGS_DIR}\n"
        f"CapabilityBoundingSet={caps}\nNoNewPrivileges=yes\nProtectSystem=strict\nProtectHome=yes\n"
        "PrivateTmp=yes\nProtectKernelTunables=yes\nProtectControlGroups=yes\nRestrictSUIDSGID=yes\n\n"
        "[Install]\nWantedBy=multi-user.target\n")
