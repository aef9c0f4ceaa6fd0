"""sshd stopped on one node in the middle of `pulumi up` (issue 17, part 4): the rollout fails
naming that node and what was in flight; what the stack recorded for the other nodes matches
their hosts (a refresh afterwards changes nothing of theirs); once sshd is back, `up`
converges and a second up has nothing to do."""

from __future__ import annotations

import subprocess
import time

from tests.pulumi_cli import PulumiProject

from .conftest import lab_command
from .labhosts import ssh
from .test_slurm_cluster import NODES

VICTIM = "node3"


def test_sshd_stopped_on_one_node_mid_up(lab, lab_session, tmp_path):
    proj = PulumiProject.copy_of_repo(tmp_path)
    proj.init_stack("lab")
    up = subprocess.Popen(["pulumi", "up", "--yes", "--stack", "lab", "--skip-preview", "--non-interactive"],
                          cwd=proj.dir, env=proj.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 600
        # the fixed point: packages installing on the victim
        while time.monotonic() < deadline and up.poll() is None:
            if ssh(VICTIM, "pgrep -x apt-get || pgrep -x dpkg", check=False).returncode == 0:
                break
            time.sleep(0.5)
        assert up.poll() is None, "up ended before packages were installing on the victim"
        # sshd stops and every session goes with it (our own multiplexed one too)
        ssh(VICTIM, "systemd-run --no-block --collect sh -c 'sleep 1; systemctl stop ssh.service ssh.socket; "
                    "pkill -x sshd'", check=False)
        text, _ = up.communicate(timeout=900)
    finally:
        if up.poll() is None:
            up.kill()
        # sshd back whatever this test finds: the modules after it need the victim
        lab_session.exclusive()
        try:
            lab_command("reboot", VICTIM)  # sshd is enabled: a reboot brings it back
        finally:
            lab_session.shared()
    try:
        assert up.returncode != 0
        assert f"host {VICTIM}" in text and "cannot reach 10.213.57.23:22 over SSH" in text, text[-4000:]

        # what was recorded for the other hosts is what they have: a refresh changes none of it
        refresh = proj.refresh(timeout=900).stdout
        changed = [line for line in refresh.splitlines()
                   if ("updated" in line or "deleted" in line) and any(n in line for n in ("node1", "node2"))]
        assert changed == [], changed

        proj.up(timeout=1200)
        out = proj.outputs()
        assert out["admission"]["admitted"] == NODES and (out["acceptance"]["accepted"] == out["admission"]["admitted"] and not out["acceptance"]["failed"])
        proj.run("preview", "--stack", "lab", "--expect-no-changes")
    finally:
        proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)
