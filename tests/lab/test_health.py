"""The node health loop on the lab: slurmd runs the check, Slurm reboots the node for real.

TEST DOUBLES: the GPUs (the fake NVML, tests/doubles/fake_nvml) and the kernel log (a container
has none of its own: `health.kernel_log` and `guards.kernel_log` name a file the test appends
stamped NVRM lines to; "since this boot" is judged by the stamp against the container's boot).
A third: the node's uptime. A container shares the machine's kernel, so the uptime slurmd
reports (sysinfo) is the machine's and a rebooted container would look to slurmctld as if it never
rebooted (it waits for a boot time newer than its request, then marks the node DOWN after
ResumeTimeout). node2's slurmd runs with Slurm's own test flag `-b` ("report node rebooted when
daemon restarted"): its boot is its start, which in the container is the boot.
Everything else is real: slurmd runs the check (HealthCheckProgram) at its start and each
interval, the guard drains through slurmctld, `scontrol reboot ASAP nextstate=RESUME` reaches
slurmd, which runs RebootProgram (`systemctl reboot` in the node's container: its systemd
reboots and the lab boots the same root filesystem again, as systemd-nspawn@.service would),
and Slurm's own node states and reservations are read back.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.pulumi_cli import PulumiProject

from .labhosts import command_log, ssh
from .test_guards import FAKE, KMSG, NODES, XID79, up

INTERVAL = 5
#: where Debian's slurmd.service reads SLURMD_OPTIONS
SLURMD_DEFAULTS = "/etc/default/slurmd"
QUARANTINE = "gpu-fleet-quarantine"
SPARE_RESERVATION = "train"
#: TEST DOUBLE of a GPU whose fault survives a power cycle: a unit that logs the XID again at every
#: boot, before slurmd starts (and so before its first health check)
BROKEN_GPU_UNIT = f"""[Unit]
Description=lab double: a GPU that falls off the bus at every boot
Before=slurmd.service
[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo "$(date +%%s.%%N) node2 kernel: {XID79}" >> {KMSG}'
[Install]
WantedBy=multi-user.target
"""


def node_state(node: str) -> tuple[str, str]:
    """Slurm's word on the node: (state with its flags, reason), from `scontrol show node`."""
    out = ssh("ctl", f"scontrol show node {node} -o").stdout
    fields = dict(kv.split("=", 1) for kv in out.split(" Reason=")[0].split() if "=" in kv)
    reason = out.split(" Reason=", 1)[1].rsplit(" [", 1)[0] if " Reason=" in out else ""
    return fields.get("State", "?"), reason


def wait_state(node: str, pred, timeout: float, what: str) -> tuple[str, str]:
    end = time.monotonic() + timeout
    seen = []
    while True:
        st = node_state(node)
        if not seen or seen[-1] != st:
            seen.append(st)
        if pred(st):
            return st
        if time.monotonic() > end:
            raise AssertionError(f"{node}: not {what} after {timeout:g} s; states seen: {seen}; "
                                 f"slurmctld: {ssh('ctl', 'tail -n 15 /var/log/slurm/slurmctld.log').stdout}")
        time.sleep(1)


def booted_at(node: str) -> float:
    """When the node's container booted (its PID 1's start)."""
    out = ssh(node, "python3 -c \"import os; b=[float(l.split()[1]) for l in open('/proc/stat') "
                    "if l.startswith('btime ')][0]; s=float(open('/proc/1/stat').read().rsplit(')',1)[1].split()[19]); "
                    "print(b + s / os.sysconf('SC_CLK_TCK'))\"").stdout
    return float(out)


def log_xid(node: str) -> None:
    ssh(node, f"echo \"$(date +%s.%N) {node} kernel: {XID79}\" >> {KMSG}")


def events(node: str) -> list[dict]:
    return [json.loads(x) for x in ssh(node, "cat /var/log/gpu-fleet/health.jsonl", check=False).stdout.splitlines()]


def health_output(proj: PulumiProject) -> dict:
    return json.loads(proj.run("stack", "output", "health", "--json", "--stack", "lab").stdout)


def set_gpu_count(node: str, keep: int) -> None:
    """Keep the first `keep` GPUs of the node's fake NVML (the rest are saved aside)."""
    ssh(node, f"""python3 - <<'EOF'
import json, os
p, saved = "{FAKE}", "{FAKE}.all"
if not os.path.exists(saved):
    os.link(p, saved)
d = json.load(open(saved))
d["devices"] = d["devices"][:{keep}]
open(p + ".t", "w").write(json.dumps(d))
os.replace(p + ".t", p)
EOF""")


def restore_gpus(node: str) -> None:
    ssh(node, f"if [ -e {FAKE}.all ]; then mv -f {FAKE}.all {FAKE}; fi")


def set_sections(proj: PulumiProject, on: bool, spares: bool = False) -> None:
    """The guards and the health check on (or their sections gone), written into the stack file
    at once (a `config set` a key costs ~1 s of CI). `spares`: node3 a spare, out of the default
    partition `lab` and in `reserve`, from which the reservation SPARE_RESERVATION holds two nodes."""
    path = proj.dir / "stacks" / "Pulumi.lab.yaml"
    doc = yaml.safe_load(path.read_text())
    for key in ("gpu-fleet:guards", "gpu-fleet:health"):
        doc["config"].pop(key, None)
    if on:
        doc["config"]["gpu-fleet:guards"] = {"enabled": True, "interval_s": 1, "kernel_log": KMSG}
        doc["config"]["gpu-fleet:health"] = {"enabled": True, "interval_s": INTERVAL, "kernel_log": KMSG,
                                             "max_reboots_per_day": 2, "reboot_timeout_s": 180}
    partitions = [{"name": "lab", "nodes": NODES, "default": True}]
    if on and spares:
        partitions = [{"name": "lab", "nodes": ["node1", "node2"], "default": True},
                      {"name": "reserve", "nodes": NODES}]
        doc["config"]["gpu-fleet:health"]["spares"] = {"nodes": ["node3"], "reservations": [
            {"name": SPARE_RESERVATION, "partition": "reserve", "node_count": 2, "users": ["fleetcanary"]}]}
    doc["config"]["gpu-fleet:slurm"]["partitions"] = partitions
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def start(proj: PulumiProject) -> None:
    """Fresh kernel logs and health state, both layers on, node2's slurmd with `-b`."""
    for n in NODES:
        ssh(n, f": > {KMSG}; rm -rf /var/log/gpu-fleet/health.jsonl /var/lib/gpu-fleet/health")
    set_sections(proj, True)
    up(proj)
    ssh("node2", f"echo 'SLURMD_OPTIONS=-b' > {SLURMD_DEFAULTS} && systemctl restart slurmd")
    wait_state("node2", lambda s: s[0] == "IDLE", 60, "registered again")


def finish(proj: PulumiProject) -> None:
    """What a test may have left on the nodes, undone; node2's slurmd as it was."""
    ssh("node2", "systemctl disable --now lab-broken-gpu.service; rm -f /etc/systemd/system/lab-broken-gpu.service",
        check=False)
    for n in NODES:
        restore_gpus(n)
    ssh("ctl", f"scontrol delete ReservationName={QUARANTINE}", check=False)
    ssh("ctl", "scontrol update NodeName=node2 State=RESUME", check=False)
    ssh("node2", f"rm -f {SLURMD_DEFAULTS}; systemctl restart slurmd", check=False)


@pytest.fixture(scope="module")
def healthy(lab, deployed, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("health")
    proj = deployed.project(tmp)
    proj.log = tmp / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(proj.log)
    try:
        start(proj)
        yield proj
    finally:
        finish(proj)


def test_slurmd_runs_the_check_on_every_node(healthy):
    conf = dict(tuple(x.strip() for x in line.split("=", 1)) for line in
                ssh("ctl", "scontrol show config").stdout.splitlines() if " = " in line)
    assert conf["HealthCheckProgram"] == "/opt/gpu-fleet/bin/gpu-fleet-healthcheck", conf
    assert conf["HealthCheckInterval"] == f"{INTERVAL} sec" and conf["HealthCheckNodeState"] == "ANY", conf
    assert conf["RebootProgram"] == "/opt/gpu-fleet/bin/gpu-fleet-reboot" and conf["ResumeTimeout"] == "180 sec"
    out = health_output(healthy)
    assert sorted(out["nodes"]) == NODES and out["quarantined"] == [] and out["healthy"] == NODES, out
    for n in NODES:
        first = json.loads(ssh(n, "cat /run/gpu-fleet-health/last.json").stdout)["time"]
        again = wait_for_result(n, after=first)  # the next run comes from slurmd, not from us
        assert again["ok"] and again["failures"] == {} and again["slurm"]["state"] in ("IDLE", "MIXED", "ALLOCATED")
        owner = ssh(n, "stat -c '%U:%G %a' /opt/gpu-fleet/bin/gpu-fleet-healthcheck /opt/gpu-fleet/bin/gpu-fleet-reboot "
                       "/etc/gpu-fleet/health.json").stdout.split("\n")
        assert owner[:3] == ["root:root 755", "root:root 755", "root:root 644"], owner


def wait_for_result(node: str, after: float, timeout: float = 3 * INTERVAL + 30) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = json.loads(ssh(node, "cat /run/gpu-fleet-health/last.json", check=False).stdout or "{}")
        if r.get("time", 0) > after:
            return r
        time.sleep(1)
    raise AssertionError(f"{node}: slurmd ran no health check in {timeout:g} s")


def test_a_second_up_changes_nothing_and_a_refresh_records_the_health(healthy):
    for args in ([], ["--refresh"]):
        healthy.log.unlink(missing_ok=True)
        p = healthy.up("--expect-no-changes", *args, check=False, timeout=900)
        assert p.returncode == 0, p.stdout[-3000:]
        assert [c for c in command_log(healthy.log) if c["mutating"]] == []
    assert health_output(healthy)["nodes"]["node2"]["check"]["ok"] is True


def test_an_xid_reboots_node2_through_slurm_and_it_comes_back_with_no_human_step(healthy):
    # a job on node1 that a recovery of node2 must not disturb
    jid = ssh("ctl", "cd /tmp && runuser -u fleetcanary -- sbatch --parsable -w node1 -p lab -t 10 -c 1 --mem=64 "
                     "--wrap 'sleep 600'").stdout.strip().split(";")[0]
    wait_job(jid, "RUNNING")
    before = booted_at("node2")
    log_xid("node2")
    st = wait_state("node2", lambda s: "DRAIN" in s[0] or "REBOOT" in s[0], 30, "drained")
    assert "REBOOT" in st[0] or st[1].startswith(("gpu-fleet guard: XID 79", "gpu-fleet health:")), st
    wait_state("node2", lambda s: "REBOOT" in s[0] or booted_at_safe("node2") > before, 60, "rebooting")
    st = wait_state("node2", lambda s: s[0] == "IDLE", 240, "back in service")
    after = booted_at("node2")
    assert after > before + 5, (before, after)  # the container really booted again
    reboot = [e for e in events("node2") if any(a["action"] == "reboot" for a in e["actions"])]
    assert len(reboot) == 1 and reboot[0]["failures"]["xid"] == ["XID 79 on PCI:0000:3b:00 since this boot"]
    assert json.loads(ssh("node2", "cat /run/gpu-fleet-health/last.json").stdout)["ok"] is True
    # node1's job ran on undisturbed
    assert ssh("ctl", f"squeue -h -j {jid} -o '%T %N'").stdout.strip() == "RUNNING node1"
    ssh("ctl", f"scancel {jid}")


def wait_job(jid: str, state: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while (got := ssh("ctl", f"squeue -h -j {jid} -o %T").stdout.strip()) != state:
        assert time.monotonic() < end, f"job {jid} is {got!r}, not {state}"
        time.sleep(1)


def booted_at_safe(node: str) -> float:
    try:
        return booted_at(node)
    except Exception:  # rebooting: no sshd for a moment
        return 0.0


def test_a_fault_that_survives_the_reboot_puts_node2_in_quarantine(healthy):
    ssh("node2", f"cat > /etc/systemd/system/lab-broken-gpu.service <<'EOF'\n{BROKEN_GPU_UNIT}EOF\n"
                 "systemctl daemon-reload && systemctl enable lab-broken-gpu.service")
    before = booted_at("node2")
    log_xid("node2")
    st = wait_state("node2", lambda s: s[1].startswith("gpu-fleet health: quarantined"), 300, "quarantined")
    assert "DRAIN" in st[0] and "after 2 reboots in 24 h: xid: XID 79" in st[1], st
    assert booted_at("node2") > before + 5  # it was rebooted (the second of the day) first
    resv = ssh("ctl", f"scontrol show reservation {QUARANTINE} -o").stdout
    assert "Nodes=node2 " in resv and "MAINT" in resv, resv
    # it stays drained: the next checks leave a quarantine alone
    time.sleep(2 * INTERVAL)
    assert node_state("node2")[1].startswith("gpu-fleet health: quarantined")
    # the admin's read: an `up --refresh` reads the fleet again and changes nothing on it
    healthy.log.unlink(missing_ok=True)
    p = healthy.up("--refresh", "--expect-no-changes", check=False, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:]
    assert [c for c in command_log(healthy.log) if c["mutating"]] == []
    out = health_output(healthy)
    assert out["quarantined"] == ["node2"], out
    evidence = out["nodes"]["node2"]
    assert evidence["check"]["failures"]["xid"] and len(evidence["reboots"]) == 2, evidence
    assert "node1" in out["healthy"] and "node3" in out["healthy"]
    # the admin's repair: the GPU replaced, the reservation lifted, the node resumed
    ssh("node2", "systemctl disable lab-broken-gpu.service; rm -f /etc/systemd/system/lab-broken-gpu.service; "
                 "rm -rf /var/lib/gpu-fleet/health/reboots.json")
    ssh("ctl", f"scontrol delete ReservationName={QUARANTINE}; scontrol reboot nextstate=RESUME node2")
    wait_state("node2", lambda s: s[0] == "IDLE", 240, "back after the repair")


def test_a_manual_resume_of_a_failing_node_is_drained_again_within_one_interval(healthy):
    set_gpu_count("node3", 7)
    try:
        wait_state("node3", lambda s: "DRAIN" in s[0], 30, "drained")
        ssh("ctl", "scontrol update NodeName=node3 State=RESUME")
        t0 = time.monotonic()
        st = wait_state("node3", lambda s: "DRAIN" in s[0] and s[1].startswith("gpu-fleet health: gpus:"),
                        INTERVAL + 10, "drained again")
        took = time.monotonic() - t0
        assert "NVML sees 7 of the 8 GPUs" in st[1] and took <= INTERVAL + 10, (st, took)
    finally:
        restore_gpus("node3")
    # proven well again: the check resumes its own drain (the guard's is the admin's to lift)
    st = wait_state("node3", lambda s: "DRAIN" not in s[0] or not s[1].startswith("gpu-fleet health:"),
                    3 * INTERVAL + 10, "resumed by the check")
    assert "DRAIN" not in st[0], st


def reservation_nodes(name: str) -> list[str]:
    out = ssh("ctl", f"scontrol show reservation {name} -o").stdout
    nodes = out.split(" Nodes=", 1)[1].split()[0]
    return ssh("ctl", f"scontrol show hostnames {nodes}").stdout.split()


def test_a_spare_stands_in_for_node2_in_a_lent_reservation(healthy):
    """node3 a spare: Weight and out of the default partition; the reservation takes node1 and
    node2; node2 drained by an admin (nobody's to resume but the admin's), Slurm gives the
    reservation node3 instead, and a refresh says so without changing anything."""
    set_sections(healthy, True, spares=True)
    up(healthy)
    assert "Weight=1000 " in ssh("ctl", "scontrol show node node3 -o").stdout
    assert reservation_nodes(SPARE_RESERVATION) == ["node1", "node2"]
    assert "Flags=REPLACE_DOWN" in ssh("ctl", f"scontrol show reservation {SPARE_RESERVATION} -o").stdout
    lent = json.loads(healthy.run("stack", "output", "spares", "--json", "--stack", "lab").stdout)
    assert lent == {SPARE_RESERVATION: {"nodes": ["node1", "node2"], "lent_from": ["node1", "node2"],
                                        "standing_in": {}}}, lent
    ssh("ctl", "scontrol update NodeName=node2 State=DRAIN Reason='admin: fan replaced'")
    t0 = time.monotonic()
    while reservation_nodes(SPARE_RESERVATION) != ["node1", "node3"]:
        assert time.monotonic() - t0 < 150, (reservation_nodes(SPARE_RESERVATION),
                                             ssh("ctl", "tail -n 15 /var/log/slurm/slurmctld.log").stdout)
        time.sleep(2)
    print(f"the spare stood in after {time.monotonic() - t0:.0f} s")
    # a job of the reservation's user runs on the spare
    jid = ssh("ctl", f"cd /tmp && runuser -u fleetcanary -- sbatch --parsable --reservation={SPARE_RESERVATION} "
                     "-p reserve -w node3 -t 5 -c 1 --mem=64 --wrap 'sleep 30'").stdout.strip().split(";")[0]
    wait_job(jid, "RUNNING")
    ssh("ctl", f"scancel {jid}")
    healthy.log.unlink(missing_ok=True)
    p = healthy.up("--refresh", "--expect-no-changes", check=False, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:]
    assert [c for c in command_log(healthy.log) if c["mutating"]] == []
    lent = json.loads(healthy.run("stack", "output", "spares", "--json", "--stack", "lab").stdout)
    assert lent[SPARE_RESERVATION]["standing_in"] == {"node3": "node2"}, lent
    # the admin's drain is left alone by the health check
    assert node_state("node2")[1] == "admin: fan replaced"
