"""The Slurm layer on the lab: `pulumi up --stack lab` makes a real cluster, and destroy undoes it.

Every srun/sbatch here runs under `timeout` (a drained cluster blocks forever).
"""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import subprocess

import pytest
import yaml

from components.providers.file import _WRITE as FILE_WRITE
from components.providers.packages import _NO_START as NO_START
from components.layers.acceptance.restart import UNIT as REOPEN
from components.layers.slurm.validate import validate_argv
from lab import slurm_release
from tests.pulumi_cli import ROOT, PulumiProject

from .labhosts import HOSTS, command_log, snapshot, ssh

NODES = ["node1", "node2", "node3"]


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           *args], capture_output=True, text=True, timeout=120)


def as_user(script: str, timeout: int = 60) -> str:
    """Run a Slurm client command on the controller as the unprivileged canary user."""
    return f"cd /tmp && timeout {timeout} runuser -u fleetcanary -- {script}"


@pytest.fixture(scope="module")
def cluster(lab, deployed, tmp_path_factory):
    """The deployed fleet (the lab stack's first `up` on fresh hosts) and those hosts as they were."""
    tmp = tmp_path_factory.mktemp("slurm")
    proj = deployed.project(tmp)
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(tmp / "commands.jsonl")
    proj.log = tmp / "commands.jsonl"
    return proj, deployed.fresh


def test_nodes_idle_with_typed_gpus(cluster):
    out = ssh("ctl", "sinfo -h -N -p lab -o '%N %T %G'").stdout.split("\n")
    rows = sorted(line.split() for line in out if line.strip())
    assert rows == [[n, "idle", "gpu:v100:8"] for n in NODES]


def acceptance(proj: PulumiProject) -> dict:
    return json.loads(proj.run("stack", "output", "acceptance", "--json", "--stack", "lab").stdout)


def test_every_gpu_of_every_node_is_run_by_a_job(cluster):
    proj, _ = cluster
    acc = acceptance(proj)
    assert acc["accepted"] == NODES and acc["failed"] == {}, acc["failed"]
    for n in NODES:
        checks = acc["nodes"][n]["checks"]
        assert all(c["passed"] for c in checks.values()), (n, checks)
        # 8 single-GPU steps held their GPUs at once, each could open one device, all 8 different
        used = checks["every_gpu_used"]["seen"]
        assert used.startswith("8 single-GPU steps held their GPUs at once (barrier saw 8 of 8)"), used
        assert sorted(used.rsplit(": ", 1)[1].split(", ")) == [str(i) for i in range(8)], used
        assert checks["device_cgroup"]["seen"] == "each single-GPU step got EPERM opening the node's other 7 GPU devices"
        assert checks["nvml"]["seen"] == "8 x Tesla V100-SXM2-16GB, UUIDs as the GPU layer recorded them"
        assert checks["visible_devices"]["seen"] == "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 (8 of 8)"
        # the kernel's view of the job's cgroup: the node's 2 CPUs, the 256 MiB the job asked
        assert checks["cgroup_cpus"]["seen"].startswith("cpuset 0-1 (2 CPUs)"), checks["cgroup_cpus"]
        assert checks["cgroup_memory"]["seen"] == "memory limit 268435456 bytes, job asked 256 MiB"
        assert "killed by the cgroup's OOM handler" in checks["oom_confined"]["seen"]
        assert checks["failed_job_leaves_nothing"]["seen"].endswith("afterwards: none")
    job = acc["fleetJob"]
    assert job["nodes"] == NODES and job["gpus"] == 24 and job["passed"], job
    assert acc["criteria"] == {"1": "met", "2": "met", "3": "not in this stack", "4": "not in this stack",
                               "5": "not in this stack", "6": "not in this stack", "7": "not in this stack"}
    # every node ran its own job, each a different one
    assert len({acc["nodes"][n]["jobs"][0] for n in NODES} | {job["job_id"]}) == 4


def test_the_acceptance_report_renders_in_chromium(cluster):
    proj, _ = cluster
    made = proj.dir / ".state" / "artifacts" / "acceptance"
    report = json.loads((made / "lab.json").read_text())
    assert list(report["nodes"]) == NODES and report["partitions"] == {"names": ["lab"], "state": "UP"}
    assert [c["status"] for c in report["criteria"]][:2] == ["met", "met"]
    keep = ROOT / ".state" / "artifacts" / "acceptance"
    keep.mkdir(parents=True, exist_ok=True)
    for f in ("lab.json", "lab.html"):
        shutil.copy(made / f, keep / f)
    url = (keep / "lab.html").as_uri()
    dom = chromium("--dump-dom", url)
    shot = keep / "lab.png"
    chromium("--window-size=1200,2400", f"--screenshot={shot}", url)
    assert "gpu-fleet acceptance: lab" in dom.stdout and "3 of 3 nodes passed" in dom.stdout, dom.stdout[-2000:]
    assert dom.stdout.count('<td class="check">device_cgroup</td>') == 3  # one row per node
    assert shot.stat().st_size > 10_000
    print(f"\nacceptance report: {keep / 'lab.html'}; screenshot: {shot}")


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
    proj.up("--refresh", "--expect-no-changes")
    log = command_log(proj.log)
    assert log and not [c for c in log if c["mutating"]], [c for c in log if c["mutating"]]


def restart_slurmctld() -> tuple[str, str]:
    """`systemctl restart slurmctld` as an admin types it; once the acceptance layer's reopen
    unit ran after it (its activation time moved on): the lab partition's State and the
    unit's journal since the restart."""
    entered = f"systemctl show -p ActiveEnterTimestampMonotonic --value {REOPEN}"
    out = ssh("ctl", f"""
        before=$({entered}); since=$(date '+%Y-%m-%d %H:%M:%S'); systemctl restart slurmctld
        for i in $(seq 300); do
          if systemctl is-active -q {REOPEN} && [ "$({entered})" != "$before" ]; then
            scontrol show partition lab -o | grep -o 'State=[A-Z]*'
            journalctl -u {REOPEN} --since "$since" --no-pager -o cat; exit 0
          fi
          sleep 0.2
        done
        echo "{REOPEN} did not run again after the restart"; exit 1""")
    state, _, journal = out.stdout.partition("\n")
    return state.strip(), journal


def test_a_controller_restart_keeps_the_accepted_partitions_open_for_that_configuration(cluster):
    """Opening a partition is an `scontrol update`, kept in slurmctld's memory only: a restart
    reads State=INACTIVE from slurm.conf. The acceptance's verdict reopens them after it, but
    not once the Slurm configuration differs from the one the acceptance passed on."""
    proj, _ = cluster
    assert restart_slurmctld()[0] == "State=UP"
    out = ssh("ctl", as_user("srun -N3 -p lab -t 1 hostname")).stdout
    assert sorted(out.split()) == NODES
    extra = "/etc/slurm/zz-lab-test.conf"
    try:
        ssh("ctl", f"echo '# one more file in the Slurm configuration' > {extra}")
        state, journal = restart_slurmctld()
        assert state == "State=INACTIVE", journal
        assert "changed since the acceptance that opened the partitions" in journal, journal
    finally:
        ssh("ctl", f"rm -f {extra}")
    state, journal = restart_slurmctld()
    assert state == "State=UP" and "partition lab reopened" in journal, journal
    proj.run("up", "--yes", "--stack", "lab", "--expect-no-changes")


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
        out = proj.up("--refresh").stdout
        changed = [line for line in out.splitlines() if "dynamic/" in line and (" updated" in line or " created" in line)]
        assert len(changed) == 1 and "node2-slurm-packages" in changed[0], out[-3000:]
        acted = [c for c in command_log(proj.log) if c["mutating"]]
        assert len(acted) == 1 and acted[0]["host"] == "node2", acted
        assert "rm -f -- /usr/sbin/policy-rc.d" in acted[0]["cmd"] and "apt-get" not in acted[0]["cmd"], acted
        assert ssh("node2", "test -e /usr/sbin/policy-rc.d", check=False).returncode == 1
        proj.up("--refresh", "--expect-no-changes")
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
    proj.up(timeout=900)
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


# ---- fail closed per node (last: it breaks two nodes and fixes them again) -----------------------

FAKE_NVML = "/etc/fake-nvml.json"
ACCEPTANCE_URN = ("urn:pulumi:lab::gpu-fleet::gpu-fleet:index:Fleet$gpu-fleet:acceptance:Acceptance"
                  "$pulumi-python:dynamic/acceptance:FleetAcceptance::fleet-acceptance")
DROP_A_GPU = f"""python3 - <<'EOF'
import json, os
d = json.load(open("{FAKE_NVML}"))
d["devices"] = d["devices"][:7]
open("{FAKE_NVML}.t", "w").write(json.dumps(d))
os.replace("{FAKE_NVML}.t", "{FAKE_NVML}")
EOF
gpu-fleet-fake-nvml-node >/dev/null"""


def node_state(node: str) -> tuple[str, str]:
    state, _, reason = ssh("ctl", f"sinfo -h -N -n {node} -o '%T|%E'").stdout.splitlines()[0].partition("|")
    return state, reason


# ---- deep checks: commands a real fleet runs on its GPUs, played here by a stand-in ----------

STAND_IN = "python3 /usr/local/lib/gpu-fleet-fake-nvml/fake_gpu_check.py"  # TEST DOUBLE (lab/fake_nvml.py)


def set_deep_checks(proj: PulumiProject, checks: list[dict]) -> None:
    path = proj.dir / "stacks" / "Pulumi.lab.yaml"
    data = yaml.safe_load(path.read_text())
    acc = data["config"].setdefault("gpu-fleet:acceptance", {})
    if checks:
        acc["deep_checks"] = checks
    else:
        acc.pop("deep_checks", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_deep_checks_pass_on_figures_and_a_failing_one_drains_its_node(cluster):
    proj, _ = cluster
    nccl = {"name": "nccl", "scope": "fleet", "command": f"{STAND_IN} all_reduce_perf",
            "figure": r"Avg bus bandwidth\s*:\s*([0-9.]+)", "min_figure": 20}
    set_deep_checks(proj, [{"name": "diag", "command": f"{STAND_IN} diag", "timeout_s": 60}, nccl])
    try:
        proj.up(timeout=900)
        acc = acceptance(proj)
        assert acc["accepted"] == NODES, acc["failed"]
        for n in NODES:
            assert acc["nodes"][n]["checks"]["deep:diag"] == {"passed": True,
                                                              "seen": "exit 0; fake diag: 8 of 8 GPUs pass"}
        nccl_seen = [c for c in acc["fleetJob"]["checks"] if c["name"] == "deep:nccl"]
        assert nccl_seen == [{"name": "deep:nccl", "passed": True,
                              "seen": "exit 0; figure 23.4 (at least 20 needed)"}], acc["fleetJob"]

        # node2's GPU 3 fails its diagnostic; the fleet's bus bandwidth is below a raised bar
        ssh("node2", f"""python3 - <<'EOF'
import json, os
d = json.load(open("{FAKE_NVML}"))
d["devices"][3]["diag_fail"] = "PCIe replay count above limit"
open("{FAKE_NVML}.t", "w").write(json.dumps(d))
os.replace("{FAKE_NVML}.t", "{FAKE_NVML}")
EOF""")
        set_deep_checks(proj, [{"name": "diag", "command": f"{STAND_IN} diag", "timeout_s": 60},
                               {**nccl, "min_figure": 30}])
        p = proj.up(check=False, timeout=900)
        out = p.stdout + p.stderr
        assert p.returncode != 0
        assert "fleet acceptance: 2 of 3 nodes passed, 3 needed" in out, out[-3000:]
        assert "node2: gpu-fleet acceptance: deep:diag: exit 1; fake diag: 7 of 8 GPUs pass" in out, out[-3000:]
        assert "the all-node job: exit 0; figure 23.4 (at least 30 needed)" in out, out[-3000:]
        assert "State=INACTIVE" in ssh("ctl", "scontrol show partition lab -o").stdout
        assert node_state("node2") == ("drained", "gpu-fleet acceptance: deep:diag: exit 1; fake diag: 7 of 8 "
                                                  "GPUs pass")
    finally:
        ssh("node2", f"""python3 - <<'EOF'
import json, os
d = json.load(open("{FAKE_NVML}"))
d["devices"][3].pop("diag_fail", None)
open("{FAKE_NVML}.t", "w").write(json.dumps(d))
os.replace("{FAKE_NVML}.t", "{FAKE_NVML}")
EOF""")
        set_deep_checks(proj, [])
    # the checks changed again: every node judged again, node2 resumed and accepted
    proj.up(timeout=900)
    acc = acceptance(proj)
    assert acc["accepted"] == NODES and acc["failed"] == {}, acc["failed"]
    assert node_state("node2") == ("idle", "none")


def test_a_node_that_breaks_after_admission_is_drained_and_min_nodes_decides(cluster):
    proj, _ = cluster
    healthy_nvml = ssh("node3", f"cat {FAKE_NVML}").stdout
    try:
        # node2: the device cgroup turned off by hand; node3: a GPU gone from NVML after the GPU
        # layer admitted it (no refresh: the GPU layer's record still says 8)
        ssh("node2", "sed -i 's/^ConstrainDevices=yes/ConstrainDevices=no/' /etc/slurm/cgroup.conf "
                     "&& systemctl restart slurmd")
        ssh("node3", DROP_A_GPU)
        # the checks changed, so every node is judged again
        proj.run("config", "set", "--path", "gpu-fleet:acceptance.job_timeout_s", "301", "--stack", "lab")
        p = proj.up(check=False, timeout=900)
        assert p.returncode != 0
        out = p.stdout + p.stderr
        assert "fleet acceptance: 1 of 3 nodes passed, 3 needed; partitions lab set INACTIVE" in out, out[-3000:]
        assert "node2: gpu-fleet acceptance: device_cgroup: 8 of 8 single-GPU steps could open more than " \
               "their GPU" in out, out[-3000:]
        assert "node3: gpu-fleet acceptance: nvml: NVML sees 7 GPUs, the stack declares 8" in out, out[-3000:]
        assert "State=INACTIVE" in ssh("ctl", "scontrol show partition lab -o").stdout
        for n, why in (("node2", "device_cgroup"), ("node3", "nvml")):
            state, reason = node_state(n)
            assert state == "drained" and reason.startswith(f"gpu-fleet acceptance: {why}:"), (n, state, reason)
        assert node_state("node1") == ("idle", "none")

        # one node is enough for this stack: the partition opens with node1, the others stay out
        proj.run("config", "set", "--path", "gpu-fleet:acceptance.min_nodes", "1", "--stack", "lab")
        proj.up(timeout=900)
        acc = acceptance(proj)
        assert acc["accepted"] == ["node1"] and sorted(acc["failed"]) == ["node2", "node3"], acc["failed"]
        assert acc["fleetJob"]["nodes"] == ["node1"]
        assert "State=UP" in ssh("ctl", "scontrol show partition lab -o").stdout
        assert node_state("node2")[0] == "drained" and node_state("node3")[0] == "drained"
        # a no-op up judges no node again: no job, nothing changed on any host
        proj.log.unlink(missing_ok=True)
        proj.up("--expect-no-changes")
        assert [c for c in command_log(proj.log) if c["mutating"]] == []
    finally:
        ssh("node2", "sed -i 's/^ConstrainDevices=no/ConstrainDevices=yes/' /etc/slurm/cgroup.conf "
                     "&& systemctl restart slurmd")
        b64 = base64.b64encode(healthy_nvml.encode()).decode()
        ssh("node3", f"echo {b64} | base64 -d > {FAKE_NVML}.t && mv {FAKE_NVML}.t {FAKE_NVML} "
                     "&& gpu-fleet-fake-nvml-node >/dev/null")
    # fixed by hand, judged again on request: the nodes this layer drained come back
    proj.up("--replace", ACCEPTANCE_URN, timeout=900)
    acc = acceptance(proj)
    assert acc["accepted"] == NODES and acc["failed"] == {}, acc["failed"]
    assert [node_state(n) for n in NODES] == [("idle", "none")] * 3
