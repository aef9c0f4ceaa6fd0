"""Interrupted runs on the lab (issue 17, part 3), at a fixed point: while a PackageSet installs
on a node (its `apt-get` running there).

- `kill -9` of the `pulumi up` process: within 10 s no provider process of that run is left
  and no command reaches a host any more (the command log stops growing); the killed run's
  lock is reported by the `make up` step (`python -m components.runlock`) with the command that
  clears it, `pulumi cancel --yes` clears it, the same step then clears the pending creates
  with the engine's documented command (`pulumi refresh --clear-pending-creates`), and `up`
  converges, after which a preview has nothing to do.
- SIGINT to `pulumi up` (Ctrl-C): the engine sends Cancel; within 5 s the provider has no ssh
  command running and sends no other; the run fails saying it was cancelled, and the next
  `up` converges.

- `kill -9` of an `up` that skips per-step checkpoints (PULUMI_SKIP_CHECKPOINTS, how a large
  fleet's `up` runs: the engine saves the state at the end only, so the killed run's state holds
  none of its work): the next `up` converges without applying again what the killed run
  finished, from what each primitive kept on its host (components/providers/kept.py), and the
  rollback still purges the packages the killed run installed and removes what it wrote.

The remote `apt-get` whose ssh client was ended may finish or die on the node; either way the
next run's PackageSet waits for dpkg's lock and configures a half-done install first.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procs import processes, providers_of, wait_for
from tests.pulumi_cli import ROOT, PulumiProject

from .conftest import remake_hosts
from .labhosts import command_log, ssh
from .test_slurm_cluster import NODES

WATCHED = "node1"  # the node whose package install is the fixed point
UP = ["pulumi", "up", "--yes", "--stack", "lab", "--skip-preview", "--non-interactive"]


def ssh_children(pids: list[int]) -> list[int]:
    return [p for p, (ppid, cmd) in processes().items() if ppid in pids and cmd.startswith("ssh ")]


def start_up_until_packages_install(proj: PulumiProject) -> subprocess.Popen:
    """`pulumi up`, returned once apt-get runs on WATCHED (the fixed point)."""
    up = subprocess.Popen(UP, cwd=proj.dir, env=proj.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and up.poll() is None:
        if ssh(WATCHED, "pgrep -x 'apt-get|dpkg|apt-mark'", check=False).returncode == 0:
            return up
        time.sleep(0.3)
    out = up.communicate(timeout=60)[0] if up.poll() is not None else ""
    up.kill()
    raise AssertionError(f"up ended (or took 10 min) before apt-get ran on {WATCHED}:\n{out[-3000:]}")


def runlock(proj: PulumiProject) -> subprocess.CompletedProcess:
    """What `make up` runs first."""
    return subprocess.run([sys.executable, "-m", "components.runlock", "lab", "--cwd", str(proj.dir),
                           "--pulumi", "pulumi"], cwd=ROOT, env=proj.env, capture_output=True, text=True,
                          timeout=900)


def converges(proj: PulumiProject) -> None:
    p = proj.up(check=False, timeout=1200)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    out = proj.outputs()
    assert out["admission"]["admitted"] == NODES and (out["acceptance"]["accepted"] == out["admission"]["admitted"] and not out["acceptance"]["failed"])
    proj.run("preview", "--stack", "lab", "--expect-no-changes")
    # the interrupted install's no-start policy (packages_no_start.sh) ended with it
    assert ssh(WATCHED, "test ! -e /usr/sbin/policy-rc.d", check=False).returncode == 0


def project(tmp_path: Path) -> PulumiProject:
    proj = PulumiProject.copy_of_repo(tmp_path)
    proj.log = tmp_path / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(proj.log)
    proj.init_stack("lab")
    return proj


@pytest.fixture(autouse=True)
def fresh_hosts(lab, lab_session):
    """Hosts made again before each test: the fixed point is a package install, which a test
    after another (or after any other module's leftovers) would find done."""
    remake_hosts(lab_session)


def test_ctrl_c_of_pulumi_up_while_packages_install(lab, tmp_path):
    proj = project(tmp_path)
    try:
        up = start_up_until_packages_install(proj)
        run_providers = providers_of(up.pid)
        assert run_providers and ssh_children(run_providers), "no ssh command in flight at the fixed point"
        up.send_signal(signal.SIGINT)
        stopped = wait_for(lambda: not ssh_children(run_providers), 5, "the provider's ssh commands end")
        count = len(command_log(proj.log))
        text, _ = up.communicate(timeout=300)
        assert up.returncode != 0
        assert "the run was cancelled" in text, text[-4000:]
        assert "Traceback" not in text, text[-4000:]
        # no mutating command ran after the stop: a refused one is not sent (nor logged), one
        # that was ended is logged without an exit code as its ssh process ends
        late = [c for c in command_log(proj.log)[count:] if c["mutating"] and c["rc"] is not None]
        assert late == [], late
        print(f"\n  Ctrl-C at the fixed point: provider's ssh commands ended {stopped:.1f} s after SIGINT")

        p = runlock(proj)  # what make up does first: no lock is left by a cancelled run
        assert p.returncode == 0, p.stdout + p.stderr
        converges(proj)
    finally:
        proj.run("cancel", "--yes", "--stack", "lab", check=False)
        proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)


def test_kill_9_of_pulumi_up_while_packages_install(lab, tmp_path):
    proj = project(tmp_path)
    try:
        up = start_up_until_packages_install(proj)
        run_providers = providers_of(up.pid)
        assert run_providers, "no provider process under pulumi"
        up.send_signal(signal.SIGKILL)
        up.wait()
        gone = wait_for(lambda: not any(p in processes() for p in run_providers), 10,
                        "the killed run's provider processes exit")
        # nothing reaches a host after that: the command log stops growing
        count = len(command_log(proj.log))
        time.sleep(5)
        assert len(command_log(proj.log)) == count, command_log(proj.log)[count:]
        print(f"\n  kill -9 at the fixed point: provider gone after {gone:.1f} s, {count} commands logged")

        # the killed run's lock: reported with the command to clear it, never cleared by itself
        p = runlock(proj)
        assert p.returncode == 1 and "process is gone" in p.stderr and "pulumi cancel" in p.stderr, p.stderr
        proj.run("cancel", "--yes", "--stack", "lab")
        # its pending creates: cleared with `pulumi refresh --clear-pending-creates` (make up does it)
        state = json.loads(proj.run("stack", "export", "--stack", "lab").stdout)["deployment"]
        pending = state.get("pending_operations") or []
        p = runlock(proj)
        assert p.returncode == 0, p.stdout + p.stderr
        if any(op["type"] == "creating" for op in pending):
            assert "--clear-pending-creates" in p.stderr
        state = json.loads(proj.run("stack", "export", "--stack", "lab").stdout)["deployment"]
        assert not state.get("pending_operations"), state.get("pending_operations")

        converges(proj)
    finally:
        proj.run("cancel", "--yes", "--stack", "lab", check=False)
        proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)


def done_by(log: list[dict]) -> set[str]:
    """Resources (the command log's `for`) that a mutating round trip finished for (exit 0)."""
    return {r for c in log if c["mutating"] and c["rc"] == 0 for r in c["for"]}


def test_kill_9_of_an_up_without_checkpoints_then_up_and_destroy(lab, tmp_path):
    proj = project(tmp_path)
    proj.env["PULUMI_SKIP_CHECKPOINTS"] = "true"  # every run of this test, as a large fleet's
    try:
        up = start_up_until_packages_install(proj)
        run_providers = providers_of(up.pid)
        up.send_signal(signal.SIGKILL)
        up.wait()
        wait_for(lambda: not any(p in processes() for p in run_providers), 10, "the killed run's provider exits")
        time.sleep(2)
        killed = command_log(proj.log)
        first = done_by(killed)
        assert first, "the killed run finished nothing before the fixed point"
        # the state holds none of it: the engine saves at the end only
        state = json.loads(proj.run("stack", "export", "--stack", "lab").stdout)["deployment"]
        assert not [r for r in state.get("resources") or [] if r["type"].startswith("pulumi-python:dynamic")]
        kept_before = ssh(WATCHED, "ls /var/lib/gpu-fleet/kept/*/ | wc -l", check=False).stdout.strip()
        assert int(kept_before or 0) > 0, "nothing kept on the node before its first changes"

        assert runlock(proj).returncode == 1  # the killed run's lock: reported, never cleared by itself
        proj.run("cancel", "--yes", "--stack", "lab")
        p = proj.up(check=False, timeout=1200)
        assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
        again = done_by(command_log(proj.log)[len(killed):])
        # nothing the killed run finished is applied again (the acceptance's jobs run at create)
        twice = sorted(r for r in first & again if "acceptance" not in r and "canary" not in r)
        assert twice == [], twice
        proj.run("preview", "--stack", "lab", "--expect-no-changes")
        added = json.loads(proj.run("stack", "export", "--stack", "lab").stdout)["deployment"]["resources"]
        node1_pkgs = [r for r in added if r["type"].endswith("PackageSet") and r["outputs"]["conn"]["name"] == WATCHED]
        purged = sorted({n for r in node1_pkgs for n in r["outputs"].get("added") or []})
        assert purged, "the create after the kill recorded nothing the killed run installed on node1"

        # the rollback purges what the killed run installed and leaves nothing kept
        p = proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)
        assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
        left = ssh(WATCHED, "dpkg-query -W -f '${Package} ${Status}\\n' " + " ".join(purged) + " 2>/dev/null"
                   " | grep ' installed$' || true", check=False).stdout.split()
        assert not left, f"still installed after the rollback: {left}"
        assert ssh(WATCHED, "test -e /var/lib/gpu-fleet/kept", check=False).returncode == 1  # no trace left
    finally:
        proj.run("cancel", "--yes", "--stack", "lab", check=False)
        proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)
