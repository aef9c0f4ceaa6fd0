"""The GPU baseline gates the Slurm layer: a drifting node is refused with a clear reason.

node2's fake NVML (a test double) shows 7 of its 8 GPUs; after `up --refresh` the stack
leaves node2 out of slurm.conf, stops its slurmd, names the mismatch in the `gpu` output,
and the canary still proves the healthy nodes. Fixing node2 brings it back.
"""

from __future__ import annotations


import pytest

from .labhosts import ssh
from .test_gpu_runtime import healthy_config, restore_healthy, set_fake
from .test_slurm_cluster import as_user


@pytest.fixture(scope="module")
def gated(lab, deployed, tmp_path_factory):
    """The deployed fleet as it is: every GPU healthy when it was deployed."""
    from . import test_gpu_runtime

    test_gpu_runtime._LAB["lab"] = lab
    proj = deployed.project(tmp_path_factory.mktemp("gate"))
    yield proj
    restore_healthy()



def test_healthy_fleet_admits_every_node(gated):
    out = gated.outputs()
    assert out["slurmNodes"] == ["node1", "node2", "node3"]
    assert out["gpu"]["healthyNodes"] == ["node1", "node2", "node3"]
    assert (out["acceptance"]["accepted"] == out["admission"]["admitted"] and not out["acceptance"]["failed"])


def test_drifting_node_is_kept_out_and_comes_back_when_fixed(gated):
    bad = healthy_config("node2")
    bad["devices"] = bad["devices"][:7]
    set_fake("node2", bad)
    gated.up("--refresh", timeout=900)
    out = gated.outputs()
    assert out["slurmNodes"] == ["node1", "node3"]
    reasons = " ".join(out["gpu"]["verdicts"]["node2"]["reasons"])
    assert "node node2 reports 7 GPUs, the stack declares 8" in reasons, reasons
    assert "NodeName=node2" not in ssh("ctl", "cat /etc/slurm/slurm.conf").stdout
    assert ssh("node2", "systemctl is-active slurmd", check=False).stdout.strip() != "active"
    rows = ssh("ctl", "sinfo -h -N -p lab -o '%N %T'").stdout.split()
    assert rows == ["node1", "idle", "node3", "idle"], rows
    assert (out["acceptance"]["accepted"] == out["admission"]["admitted"] and not out["acceptance"]["failed"])
    assert sorted(ssh("ctl", as_user("srun -N2 -p lab -t 1 hostname")).stdout.split()) == ["node1", "node3"]

    restore_healthy(["node2"])
    gated.up("--refresh", timeout=900)
    assert gated.outputs()["slurmNodes"] == ["node1", "node2", "node3"]
    assert sorted(ssh("ctl", as_user("srun -N3 -p lab -t 1 hostname")).stdout.split()) == ["node1", "node2", "node3"]
