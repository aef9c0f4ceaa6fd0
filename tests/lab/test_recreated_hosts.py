"""Hosts wiped and booted again under the same names and addresses, with the stack's state
still recording them (`lab down; lab up; make lab`): the first `up --refresh` converges.

Before, the refresh probed the GPU baseline before pynvml was back on the nodes, judged every
node failed, rendered a slurm.conf without nodes, and only the isolated slurmctld validation
stopped the rollout. Now such a refresh records the nodes as "not known yet", and the same run
probes them again once the layer has put pynvml back (issue 17, part 1).
"""

from __future__ import annotations


from tests.pulumi_cli import PulumiProject

from .conftest import lab_command
from .labhosts import ssh
from .test_slurm_cluster import NODES


def converges_in_one_up_refresh(proj: PulumiProject) -> None:
    """One `up --refresh` and every node is back: admitted, GPU-healthy, the canary passing."""
    p = proj.up("--refresh", check=False, timeout=1200)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    out = proj.outputs()
    assert out["admission"] == {"admitted": NODES, "refused": {}}
    assert out["gpu"]["healthyNodes"] == NODES
    assert (out["acceptance"]["accepted"] == out["admission"]["admitted"] and not out["acceptance"]["failed"])


def test_lab_down_up_then_one_up_refresh_converges(deployed, lab_session, tmp_path):
    proj = deployed.project(tmp_path)
    lab_session.exclusive()  # no other test session is using the hosts
    try:
        lab_command("down", "--keep-checkpoints", timeout=300)
        lab_command("up")
    finally:
        lab_session.shared()
    converges_in_one_up_refresh(proj)
    proj.run("preview", "--stack", "lab", "--expect-no-changes")


def test_one_node_reimaged_in_place_converges_in_one_up_refresh(deployed, lab_session, tmp_path):
    """A real fleet's case: node2 wiped and reinstalled under the same name and address (a new
    root filesystem from the base image and a new host key, entered in known_hosts), with the
    stack's state still recording everything the layers put on it."""
    proj = deployed.project(tmp_path)
    lab_session.exclusive()
    try:
        lab_command("reimage", "node2")
    finally:
        lab_session.shared()
    assert ssh("node2", "test -e /etc/slurm/slurm.conf", check=False).returncode != 0  # wiped
    assert ssh("node2", "systemctl is-active slurmd", check=False).stdout.strip() != "active"
    converges_in_one_up_refresh(proj)
    assert ssh("node2", "systemctl is-active slurmd").stdout.strip() == "active"
    proj.run("preview", "--stack", "lab", "--expect-no-changes")
