"""The Slurm layer on the lab: `pulumi up --stack lab` makes a real cluster, and destroy undoes it.

Every srun/sbatch here runs under `timeout` (a drained cluster blocks forever).
"""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from components.providers.file import _WRITE as FILE_WRITE
from components.providers.packages import _NO_START as NO_START
from components.layers.slurm.validate import validate_argv
from lab import slurm_release
from tests.pulumi_cli import PulumiProject

from .labhosts import command_log, ssh

HOSTS = ["ctl", "node1", "node2", "node3"]
NODES = ["node1", "node2", "node3"]

SNAPSHOT = r"""
echo "pkgs $(dpkg-query -W -f='${Package}=${Version}\n' | sha256sum | cut -c1-16)"
echo "held $(apt-mark showhold | tr '\n' ' ')"
echo "users $(getent passwd slurm munge fleetcanary | cut -d: -f1,3 | tr '\n' ' ')"
echo "etc $(ls -A /etc/slurm /etc/munge 2>/dev/null | tr '\n' ' ')"
echo "units $(systemctl is-enabled slurmd slurmctld munge 2>/dev/null | tr '\n' ' ')"
echo "fakegpus $(ls /dev | grep -c fakegpu)"
"""


def snapshot(host: str) -> dict[str, str]:
    out = ssh(host, SNAPSHOT).stdout
    return {k: v.strip() for k, _, v in (line.partition(" ") for line in out.splitlines())}


def as_user(script: str, timeout: int = 60) -> str:
    """Run a Slurm client command on the controller as the unprivileged canary user."""
    return f"cd /tmp && timeout {timeout} runuser -u fleetcanary -- {script}"


@pytest.fixture(scope="module")
def cluster(lab, tmp_path_factory):
    before = {h: snapshot(h) for h in HOSTS}
    tmp = tmp_path_factory.mktemp("slurm")
    proj = PulumiProject.copy_of_repo(tmp)
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(tmp / "commands.jsonl")
    proj.log = tmp / "commands.jsonl"
    proj.init_stack("lab")
    proj.run("up", "--yes", "--stack", "lab", timeout=900)
    yield proj, before
    proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)


def test_nodes_idle_with_typed_gpus(cluster):
    out = ssh("ctl", "sinfo -h -N -p lab -o '%N %T %G'").stdout.split("\n")
    rows = sorted(line.split() for line in out if line.strip())
    assert rows == [[n, "idle", "gpu:v100:8"] for n in NODES]


def test_canary_acceptance_is_a_stack_output(cluster):
    proj, _ = cluster
    canary = json.loads(proj.run("stack", "output", "canary", "--json", "--stack", "lab").stdout)
    assert canary["passed"] is True
    assert canary["cudaVisibleDevices"] == "0"
    assert f"job_{canary['jobId']}" in canary["cgroup"]


def test_srun_on_every_node(cluster):
    out = ssh("ctl", as_user("srun -N3 -p lab -t 1 hostname")).stdout
    assert sorted(out.split()) == NODES


def test_gpu_job_sees_its_gpus_and_only_them(cluster):
    script = ('srun -N1 -p lab -w node2 --gres=gpu:v100:2 --mem=100 -t 1 sh -c '
              '"echo CVD=\\$CUDA_VISIBLE_DEVICES; for i in 0 1 2; do head -c1 /dev/fakegpu\\$i 2>&1 | '
              'sed \\"s/^/dev\\$i: /\\"; done"')
    out = ssh("ctl", as_user(script)).stdout
    assert "CVD=0,1" in out
    # Allocated devices are reachable (no driver behind them: ENXIO); the others are denied.
    assert "dev0: head: cannot open '/dev/fakegpu0' for reading: No such device or address" in out
    assert "dev2: head: cannot open '/dev/fakegpu2' for reading: Operation not permitted" in out


def test_job_over_its_memory_is_oom_killed(cluster):
    p = ssh("ctl", as_user('srun -N1 -p lab -w node3 --mem=50 -t 1 python3 -c '
                           '"x = bytearray(300 * 1024 * 1024); print(len(x))"'), check=False)
    assert p.returncode != 0
    assert "Out Of Memory" in p.stderr or "oom-kill" in p.stderr, p.stderr


def test_packages_come_from_the_release_repository_on_storage(cluster):
    rel = "/srv/gpu-fleet/repo/slurm/22.05.8-4_deb12u3"
    listing = ssh("storage", f"cd {rel} && sha256sum --quiet -c SHA256SUMS && ls && cat release.json").stdout
    assert "slurmd_22.05.8-4+deb12u3_amd64.deb" in listing and "Packages.gz" in listing
    assert '"debian_version": "22.05.8-4+deb12u3"' in listing
    policy = ssh("node1", "apt-cache policy slurmd").stdout
    assert "http://10.213.57.10:8787/slurm/22.05.8-4_deb12u3" in policy, policy
    assert "slurmd" in ssh("node1", "apt-mark showhold").stdout.split()


def test_identities_and_live_delegate(cluster):
    for h in HOSTS:
        s = snapshot(h)
        assert s["users"] == "slurm:64030 munge:440 fleetcanary:64200", (h, s)
    for n in NODES:
        assert ssh(n, "systemctl show -p Delegate --value slurmd").stdout.strip() == "yes"


def test_munge_credential_from_controller_decodes_everywhere(cluster):
    cred = ssh("ctl", "munge -n").stdout.strip()
    for n in NODES:
        out = ssh(n, f"echo '{cred}' | unmunge").stdout
        assert "STATUS:          Success (0)" in out, (n, out)


def test_second_up_changes_nothing_and_mutates_nothing(cluster):
    proj, _ = cluster
    proj.log.unlink(missing_ok=True)
    proj.run("up", "--yes", "--stack", "lab", "--expect-no-changes")
    assert command_log(proj.log) == []
    proj.run("up", "--yes", "--stack", "lab", "--refresh", "--expect-no-changes", "--skip-preview")
    log = command_log(proj.log)
    assert log and not [c for c in log if c["mutating"]], [c for c in log if c["mutating"]]


def test_munge_key_is_a_secret_everywhere(cluster):
    proj, _ = cluster
    key = proj.run("config", "get", "gpu-fleet:munge_key", "--stack", "lab").stdout.strip()
    assert len(key) > 1000
    assert key not in proj.run("stack", "export", "--stack", "lab").stdout
    assert key not in (proj.dir / "stacks" / "Pulumi.lab.yaml").read_text()
    assert key not in proj.log.read_text()
    assert ssh("ctl", "stat -c '%a %U %G' /etc/munge/munge.key").stdout.strip() == "400 munge munge"
    logs = ssh("ctl", "journalctl --no-pager -q 2>/dev/null; cat /var/log/slurm/*.log 2>/dev/null").stdout
    assert key[:64] not in logs


def test_a_no_start_policy_left_by_a_lost_host_is_drift_that_up_removes(cluster):
    """The install's no-start policy outlives an install killed with the host (SIGKILL: no
    trap runs). Under it no later install on node2 would start a service; refresh reports it
    on node2's package set and `up --refresh` removes it, nothing else."""
    proj, _ = cluster
    ssh("node2", f"sh -c {shlex.quote(NO_START)} sh sh -c 'kill -9 $PPID'; test -e /usr/sbin/policy-rc.d")
    try:
        proj.log.unlink(missing_ok=True)
        out = proj.run("up", "--yes", "--stack", "lab", "--refresh", "--skip-preview").stdout
        changed = [line for line in out.splitlines() if "dynamic/" in line and (" updated" in line or " created" in line)]
        assert len(changed) == 1 and "node2-slurm-packages" in changed[0], out[-3000:]
        acted = [c for c in command_log(proj.log) if c["mutating"]]
        assert len(acted) == 1 and acted[0]["host"] == "node2", acted
        assert "rm -f -- /usr/sbin/policy-rc.d" in acted[0]["cmd"] and "apt-get" not in acted[0]["cmd"], acted
        assert ssh("node2", "test -e /usr/sbin/policy-rc.d", check=False).returncode == 1
        proj.run("up", "--yes", "--stack", "lab", "--refresh", "--skip-preview", "--expect-no-changes")
    finally:
        ssh("node2", "rm -f /usr/sbin/policy-rc.d")


def test_a_release_slurm_cannot_upgrade_to_in_place_is_refused_and_nothing_moves(cluster):
    """22.05 -> 24.11 skips three majors; 24.11's daemons refuse 22.05's saved state. The
    preview says so, naming the host, and `up` (which previews first) changes nothing; nor does
    `up --skip-preview`, refused by the upgrade window before the release is published."""
    proj, _ = cluster
    release = {k: proj.run("config", "get", "--path", f"gpu-fleet:slurm.release.{k}", "--stack", "lab").stdout.strip()
               for k in ("version", "debian_version")}
    before = {h: snapshot(h) for h in HOSTS}
    published = ssh("storage", "ls /srv/gpu-fleet/repo/slurm").stdout
    proj.log.unlink(missing_ok=True)
    try:
        proj.run("config", "set", "--path", "gpu-fleet:slurm.release.version", slurm_release.VERSION, "--stack", "lab")
        proj.run("config", "set", "--path", "gpu-fleet:slurm.release.debian_version", slurm_release.DEBIAN_VERSION,
                 "--stack", "lab")
        for args in (("preview",), ("up", "--yes"), ("up", "--yes", "--skip-preview")):
            p = proj.run(*args, "--stack", "lab", check=False, timeout=600)
            text = p.stdout + p.stderr
            assert p.returncode != 0, text[-3000:]
            refused = [h for h in HOSTS if f"host {h}: installed slurm-client 22.05.8-4+deb12u3" in text]
            assert refused and "Slurm 24.11 upgrades in place only from 24.05, 23.11 or 23.02" in text, text[-4000:]
            if "--skip-preview" in args:  # every Slurm host named at once, before the publication
                assert sorted(refused) == HOSTS and "Slurm upgrade window: 4 host(s)" in text, text[-4000:]
        assert not [c for c in command_log(proj.log) if c["mutating"]]
        assert ssh("storage", "ls /srv/gpu-fleet/repo/slurm").stdout == published  # nothing published
        assert {h: snapshot(h) for h in HOSTS} == before
    finally:
        for k, v in release.items():
            proj.run("config", "set", "--path", f"gpu-fleet:slurm.release.{k}", v, "--stack", "lab")
    proj.run("preview", "--stack", "lab", "--expect-no-changes")


def test_destroy_restores_hosts_and_up_restores_the_same_cluster(cluster):
    proj, before = cluster
    key_sha = ssh("node1", "sha256sum /etc/munge/munge.key").stdout.split()[0]
    proj.run("destroy", "--yes", "--stack", "lab", timeout=900)
    assert {h: snapshot(h) for h in HOSTS} == before
    proj.run("up", "--yes", "--stack", "lab", timeout=900)
    assert ssh("node1", "sha256sum /etc/munge/munge.key").stdout.split()[0] == key_sha
    out = ssh("ctl", as_user("srun -N3 -p lab -t 1 hostname")).stdout
    assert sorted(out.split()) == NODES


def _validate(candidate: str) -> "subprocess.CompletedProcess":
    """The controller's validate hook, run as the File primitive runs it, on a candidate file."""
    argv = validate_argv("/etc/slurm/slurm.conf")
    return ssh("ctl", shlex.join([a.replace("{}", candidate) if a == "{}" else a for a in argv]),
               check=False)


def _live_ctld() -> str:
    return ssh("ctl", "systemctl show -p MainPID --value slurmctld; sha256sum /etc/slurm/slurm.conf").stdout


@pytest.mark.parametrize("edit, why", [
    ("s|^SelectType=.*|SelectType=select/nonexistent|", "select/nonexistent"),
    ("s|^SlurmctldHost=.*|SlurmctldHost=ctl(10.213.57.11)\\nFrobnicate=yes|", "Frobnicate"),
    ("s|^NodeName=node1 .*|NodeName=node1 NodeAddr=10.213.57.21 CPUs=two|", "CPUs"),
])
def test_bad_slurm_conf_is_refused_in_isolation(cluster, edit, why):
    live = _live_ctld()
    ssh("ctl", f"sed -e '{edit}' /etc/slurm/slurm.conf > /tmp/candidate.conf")
    p = _validate("/tmp/candidate.conf")
    assert p.returncode != 0 and "slurm.conf refused" in p.stderr and why in p.stderr, p.stderr
    # Through the File primitive: the write step runs the hook and leaves the live file alone.
    write = ["sh", "-c", FILE_WRITE, "sh", "/etc/slurm/slurm.conf", "root", "root", "644",
             *validate_argv("/etc/slurm/slurm.conf")]
    w = ssh("ctl", shlex.join(write) + " < /tmp/candidate.conf", check=False)
    assert w.returncode != 0 and "slurm.conf refused" in w.stderr, w.stderr
    assert _live_ctld() == live
    assert ssh("ctl", "ss -Hltn 'sport = :16817'; ls -d /run/gpu-fleet-slurmconf.* /etc/slurm/.gpu-fleet.* "
                      "2>/dev/null; scontrol ping | grep -c UP").stdout.split() == ["1"]


def test_live_slurm_conf_passes_validation_without_touching_the_live_controller(cluster):
    live = _live_ctld()
    ssh("ctl", "cp /etc/slurm/slurm.conf /tmp/candidate.conf")
    p = _validate("/tmp/candidate.conf")
    assert p.returncode == 0 and "validated" in p.stdout, p.stderr
    assert _live_ctld() == live
    assert ssh("ctl", "ss -Hltn 'sport = :16817' | wc -l").stdout.strip() == "0"
    # The test daemon never registered with accounting or replaced the live state.
    assert ssh("ctl", "cat /var/lib/slurm/slurmctld/clustername").stdout.strip() == "lab"
