"""A host whose `slurm` uid differs from the stack's stops the rollout, fail closed."""

from __future__ import annotations

import pytest

from tests.pulumi_cli import PulumiProject

from .labhosts import ssh


@pytest.fixture
def drifted_node2(lab):
    ssh("node2", "useradd --system -u 64999 -M -d /nonexistent -s /usr/sbin/nologin slurm")
    yield
    ssh("node2", "userdel slurm 2>/dev/null; groupdel slurm 2>/dev/null; true")


def test_uid_drift_stops_the_rollout_and_no_partition_serves(drifted_node2, tmp_path):
    proj = PulumiProject.copy_of_repo(tmp_path)
    proj.init_stack("lab")
    try:
        p = proj.run("up", "--yes", "--stack", "lab", check=False, timeout=900)
        out = p.stdout + p.stderr
        assert p.returncode != 0
        assert "host node2" in out or "node2-accounts" in out, out
        assert "user slurm exists with uid 64999, the stack fixes uid 64030" in out, out
        assert "never renumbers" in out
        # node2 was left as it was, and the production partition is not serving.
        assert ssh("node2", "id -u slurm").stdout.strip() == "64999"
        state = ssh("ctl", "sinfo -h -p lab -o %a 2>/dev/null || true", check=False).stdout.strip()
        assert state in ("", "inact"), state
        assert "FleetAcceptance fleet-acceptance created" not in out
    finally:
        proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)
