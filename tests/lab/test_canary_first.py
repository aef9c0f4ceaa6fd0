"""Canary first inside one stack: the canary node proves a rollout before the rest move.

The lab stack's canary is node1. A canary job that fails there (its job root is not
writable for the canary user) stops `pulumi up` before node2 and node3 get a single
Slurm package, with the production partitions INACTIVE; fixed, the next `up` rolls the
rest of the fleet and opens the partitions.
"""

from __future__ import annotations

import json

import pytest

from tests.pulumi_cli import PulumiProject

from .labhosts import command_log, ssh
from .test_slurm_cluster import NODES, as_user

REST = ["node2", "node3"]


def installed(host: str, package: str) -> bool:
    return ssh(host, f"dpkg-query -W -f='${{Status}}' {package} 2>/dev/null", check=False).stdout \
        .endswith("installed")


@pytest.fixture(scope="module")
def project(lab, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("canary-first")
    proj = PulumiProject.copy_of_repo(tmp)
    proj.log = tmp / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(proj.log)
    proj.init_stack("lab")
    yield proj
    ssh("node1", "chmod 1777 /tmp")
    proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)


def test_failed_canary_leaves_the_rest_of_the_fleet_untouched(project):
    ssh("node1", "chmod 1755 /tmp")  # the canary user cannot write its job root
    p = project.run("up", "--yes", "--stack", "lab", check=False, timeout=900)
    assert p.returncode != 0
    assert "canary acceptance on node1 failed" in p.stdout and "job root is not writable" in p.stdout, \
        p.stdout[-3000:]
    # one readable block: the resource, then our message; no SDK frames before it
    assert "Traceback" not in p.stdout + p.stderr and "pulumi/dynamic/__main__.py" not in p.stdout, \
        p.stdout[-3000:]
    for n in REST:
        assert not installed(n, "slurmd"), n
    assert installed("node1", "slurmd")
    parts = ssh("ctl", "scontrol show partition lab -o").stdout
    assert "State=INACTIVE" in parts, parts


def test_fixed_canary_then_the_rest_roll_in_order(project):
    ssh("node1", "chmod 1777 /tmp")
    project.log.unlink(missing_ok=True)
    project.up(timeout=900)
    log = command_log(project.log)
    gate = next(i for i, c in enumerate(log) if c["host"] == "ctl" and "srun" in c["cmd"])
    for n in REST:
        first_install = next(i for i, c in enumerate(log)
                             if c["host"] == n and c["mutating"] and "apt-get" in c["cmd"]
                             and "slurmd=" in c["cmd"])
        assert gate < first_install, (n, log[gate], log[first_install])
    out = json.loads(project.run("stack", "output", "acceptance", "--json", "--stack", "lab").stdout)
    assert out["accepted"] == NODES and out["failed"] == {}, out["failed"]
    assert sorted(ssh("ctl", as_user("srun -N3 -p lab -t 1 hostname")).stdout.split()) == NODES
