"""Golden files for the Slurm renderers; regenerate with GPU_FLEET_UPDATE_GOLDEN=1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from components.config.load import parse_fleet_config
from components.layers.slurm.render import (
    count_visible_gpus, render_cgroup_conf, render_gres_conf, render_slurm_conf,
)
from tests.conftest import fleet14, stack_config

GOLDEN = Path(__file__).resolve().parents[2] / "golden"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GPU_FLEET_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with GPU_FLEET_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"


#: the golden `full.*` files are the full fleet once K3s retirement has handed its nodes over
#: (node owners do not appear in the rendered files)
VALID_STACKS = {"canary": lambda: stack_config("canary"), "full": fleet14}


@pytest.mark.parametrize("stack", sorted(VALID_STACKS))
def test_golden(stack):
    cfg = parse_fleet_config(VALID_STACKS[stack](), stack)
    check_golden(f"{stack}.slurm.conf", render_slurm_conf(
        cfg.slurm, cfg.hosts.controller, cfg.slurm_nodes(), acceptance=cfg.acceptance.enabled,
        accounting_host="storage"))
    check_golden(f"{stack}.gres.conf", render_gres_conf(cfg.slurm, cfg.slurm_nodes()))
    check_golden(f"{stack}.cgroup.conf", render_cgroup_conf(cfg.slurm))


def test_full_conf_contracts():
    cfg = parse_fleet_config(fleet14(), "full")
    conf = render_slurm_conf(cfg.slurm, cfg.hosts.controller, cfg.slurm_nodes(), acceptance=cfg.acceptance.enabled, accounting_host="storage")
    for line in ["SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory", "GresTypes=gpu",
                 "ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup,task/affinity",
                 "AuthType=auth/munge", "CredType=cred/munge", "SchedulerType=sched/backfill",
                 "DisableRootJobs=YES", "AccountingStorageTRES=gres/gpu,gres/gpu:v100"]:
        assert line in conf.splitlines(), line
    nodes = [line for line in conf.splitlines() if line.startswith("NodeName=")]
    assert len(nodes) == 14 and all("Gres=gpu:v100:8" in line and "RealMemory=184000" in line for line in nodes)
    assert "gpu15" not in conf  # unreachable: pending, never added


def test_k3s_nodes_outside_the_partition_are_never_added():
    """The full stack with its K3s nodes left out of the partition (what previews today)."""
    raw = stack_config("full")
    raw["gpu-fleet:slurm"]["partitions"][0]["nodes"] = ["gpu01", "gpu02"]
    del raw["gpu-fleet:k3s_retirement"]
    full = parse_fleet_config(raw, "full")
    conf = render_slurm_conf(full.slurm, full.hosts.controller, full.slurm_nodes(), acceptance=full.acceptance.enabled)
    assert [line.split()[0] for line in conf.splitlines() if line.startswith("NodeName=")] == [
        "NodeName=gpu01", "NodeName=gpu02"]


def test_cgroup_v1_needs_automount():
    raw = stack_config("canary")
    raw["gpu-fleet:slurm"]["cgroup_plugin"] = "cgroup/v1"
    text = render_cgroup_conf(parse_fleet_config(raw, "canary").slurm)
    assert "CgroupPlugin=cgroup/v1\nCgroupAutomount=yes\n" in text
    assert "CgroupAutomount" not in render_cgroup_conf(parse_fleet_config(stack_config("canary"), "c").slurm)


def test_gres_files_per_node():
    canary = parse_fleet_config(stack_config("canary"), "canary")
    text = render_gres_conf(canary.slurm, canary.slurm_nodes())
    assert "NodeName=gpu01 Name=gpu Type=v100 File=/dev/nvidia[0-7]" in text


@pytest.mark.parametrize("value,n", [
    ("0,1,2,3,4,5,6,7", 8), ("3", 1), ("", 0), ("0,1,2,3,4,5,6,7\n", 8), ("4,5", 2),
])
def test_gpus_counted_by_fields_not_separators(value, n):
    assert count_visible_gpus(value) == n
