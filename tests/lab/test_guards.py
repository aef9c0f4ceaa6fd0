"""The guards layer on the lab: a guard on each GPU node drains it through the real slurmctld.

TEST DOUBLES: the GPUs (the fake NVML, tests/doubles/fake_nvml: a test heats a GPU by rewriting
the node's /etc/fake-nvml.json, which the double reads at every temperature query) and the
kernel log (a container has none of its own: `guards.kernel_log` names a file the test appends
NVRM lines to). Everything else is real: systemd runs the guard, pynvml from the GPU layer,
`scontrol` through MUNGE to slurmctld, Slurm's own node state read back.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.pulumi_cli import PulumiProject

from .labhosts import command_log, ssh

NODES = ["node1", "node2", "node3"]
KMSG = "/var/lib/gpu-fleet-fake-nvml/kmsg"
#: TEST DOUBLE of /proc/meminfo (a lab host's is the whole machine's): what the memory guard reads
MEMINFO = "/var/lib/gpu-fleet-fake-nvml/meminfo"
HEALTHY = "MemTotal: 134217728 kB\nMemAvailable: 67108864 kB\n"
FAKE = "/etc/fake-nvml.json"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus."
XID13 = "NVRM: Xid (PCI:0000:86:00): 13, pid=4243, Graphics SM Warp Exception on (GPC 0, TPC 1)"


def up(proj: PulumiProject, *args: str) -> None:
    p = proj.up(*args, check=False, timeout=1200)
    text = p.stdout + p.stderr
    at = text.find("Diagnostics:")
    assert p.returncode == 0, text[at:at + 6000] if at >= 0 else text[-5000:]


def node_state(node: str) -> tuple[str, str]:
    """Slurm's own word on the node: (state, reason), e.g. ('drained', 'gpu-fleet guard: ...')."""
    out = ssh("ctl", f"sinfo -h -N -n {node} -o '%T|%E'").stdout.splitlines()[0]
    state, reason = out.split("|", 1)
    return state.upper(), reason


def wait_state(node: str, pred, timeout: float = 30.0) -> tuple[str, str]:
    end = time.monotonic() + timeout
    while True:
        st = node_state(node)
        if pred(st) or time.monotonic() > end:
            return st
        time.sleep(0.5)


def set_gpu(node: str, gpu: int, **fields) -> None:
    """Rewrite GPU `gpu` of the node's fake NVML configuration (None removes a field)."""
    ssh(node, f"""python3 - <<'EOF'
import json, os
p = "{FAKE}"
d = json.load(open(p))
dev = d["devices"][{gpu}]
for k, v in {fields!r}.items():
    if v is None:
        dev.pop(k, None)
    else:
        dev[k] = v
open(p + ".t", "w").write(json.dumps(d))
os.replace(p + ".t", p)
EOF""")


def set_temp(node: str, gpu: int, temp: int) -> None:
    set_gpu(node, gpu, temperature=temp)


def events(node: str) -> list[dict]:
    return [json.loads(x) for x in ssh(node, "cat /var/log/gpu-fleet/guard.jsonl").stdout.splitlines()]


def resume(node: str) -> None:
    ssh("ctl", f"scontrol update NodeName={node} State=RESUME")


@pytest.fixture(scope="module")
def guarded(lab, deployed, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guards")
    proj = deployed.project(tmp)
    proj.log = tmp / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(proj.log)
    for n in NODES:
        ssh(n, f": > {KMSG}; printf '{HEALTHY}' > {MEMINFO}; rm -f /var/log/gpu-fleet/guard.jsonl")
    # the section written into the stack file at once (a `config set` a key costs ~1 s of CI)
    stack = proj.dir / "stacks" / "Pulumi.lab.yaml"
    doc = yaml.safe_load(stack.read_text())
    doc["config"]["gpu-fleet:guards"] = {
        "enabled": True, "interval_s": 1, "thermal": {"soak_s": 3}, "kernel_log": KMSG,
        "memory": {"meminfo": MEMINFO, "sustain": 2, "grace_s": 2, "cooldown_s": 3, "unified_memory": True,
                   "protect": ["protected-"]}}
    proj.write_stack("lab", yaml.safe_dump(doc, sort_keys=False))
    try:
        up(proj)
        yield proj
    finally:
        for n in NODES:
            for gpu in range(8):
                set_gpu(n, gpu, temperature=40, temperature_error=None)
            set_processes(n, [])


def test_every_gpu_node_runs_its_guard_with_cap_kill_alone(guarded):
    out = json.loads(guarded.run("stack", "output", "guards", "--json", "--stack", "lab").stdout)
    assert out["nodes"] == NODES and out["drain_on"]["soak"] == "88 C for 3 s" and out["dry_run"] is False
    for n in NODES:
        pid = ssh(n, "systemctl show -p MainPID --value gpu-fleet-guard.service").stdout.strip()
        assert pid not in ("", "0"), n
        cmd = ssh(n, f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout
        assert "/opt/gpu-fleet/bin/gpu-fleet-guard --config /etc/gpu-fleet/guard.json" in cmd, (n, cmd)
        caps = dict(line.split(":\t") for line in ssh(n, f"grep ^Cap /proc/{pid}/status").stdout.splitlines())
        # CAP_KILL alone (the memory guard stops other users' processes), nothing else
        assert caps["CapEff"] == caps["CapBnd"] == "0000000000000020", (n, caps)
        status = json.loads(ssh(n, "cat /run/gpu-fleet-guard/status.json").stdout)
        assert status["pid"] == int(pid) and len(status["gpus"]) == 8 and status["nvml_error"] is None, status
        assert status["tripped"] == [] and status["kernel_log_alive"], status
        assert node_state(n)[0] in ("IDLE", "ALLOCATED", "MIXED"), (n, node_state(n))


def guard_commands(log: list[dict], node: str) -> list[dict]:
    return [c for c in log if c["host"] == node
            and (any("guard" in f for f in c["for"]) or "gpu-fleet-guard" in c["cmd"])]


def test_a_second_up_changes_nothing_and_a_refresh_sends_only_probes(guarded):
    for args in ([], ["--refresh"]):
        guarded.log.unlink(missing_ok=True)
        p = guarded.up("--expect-no-changes", *args, check=False, timeout=900)
        assert p.returncode == 0, p.stdout[-3000:]
        log = command_log(guarded.log)
        assert [c for c in log if c["mutating"]] == []
        for n in NODES:
            mine = guard_commands(log, n)
            if not args:  # nothing changed: the guards layer does not even read the nodes
                assert mine == [], (n, mine)
            else:  # issue 16: at most 5 SSH commands per host and layer in a no-op refresh
                assert 1 <= len(mine) <= 5, (n, [(c["for"], c["cmd"][:80]) for c in mine])


def test_a_gpu_soaking_in_heat_drains_its_node_after_the_budget(guarded):
    set_temp("node2", 5, 90)
    t0 = time.monotonic()
    try:
        state, reason = wait_state("node2", lambda s: "DRAIN" in s[0])
        took = time.monotonic() - t0
        assert "DRAIN" in state and reason.startswith("gpu-fleet guard: GPU 5 heat: 90 C after"), (state, reason)
        # soak_s 3: not before 2 s (the interval before the first hot sample counts: when the
        # GPU crossed soak_c within it is unknown, so the guard counts the heat, not its absence)
        assert took >= 2, took
        assert "DRAIN" not in node_state("node3")[0]
        trip = next(e for e in events("node2") if e["event"] == "trip")
        assert trip["gpu"] == 5 and trip["above_s"] >= 3
    finally:
        set_temp("node2", 5, 40)
    time.sleep(2)
    resume("node2")  # an admin resumes it; the guard never does, and it stays resumed once cool
    time.sleep(3)
    assert "DRAIN" not in node_state("node2")[0]


def test_a_hardware_xid_drains_and_an_application_xid_does_not(guarded):
    ssh("node3", f"echo \"$(date +%s.%6N) node3 kernel: {XID13}\" >> {KMSG}")  # journalctl's short-unix
    time.sleep(4)
    assert "DRAIN" not in node_state("node3")[0]
    assert any(e["event"] == "xid" and e["xid"] == 13 for e in events("node3"))
    ssh("node3", f"echo \"$(date +%s.%6N) node3 kernel: {XID79}\" >> {KMSG}")
    state, reason = wait_state("node3", lambda s: "DRAIN" in s[0])
    resume("node3")
    assert "DRAIN" in state and reason == "gpu-fleet guard: XID 79 on PCI:0000:3b:00", (state, reason)


def test_a_gpu_nvml_loses_drains_its_node_and_the_others_stay_watched(guarded):
    set_gpu("node1", 2, temperature_error=15)  # NVML_ERROR_GPU_IS_LOST
    try:
        state, reason = wait_state("node1", lambda s: "DRAIN" in s[0])
        assert "DRAIN" in state and reason == "gpu-fleet guard: GPU 2 does not answer NVML (GPU is lost)", \
            (state, reason)
        status = json.loads(ssh("node1", "cat /run/gpu-fleet-guard/status.json").stdout)
        assert status["gpu_errors"] == {"2": "GPU is lost"} and len(status["gpus"]) == 7, status
    finally:
        set_gpu("node1", 2, temperature_error=None)
    time.sleep(2)
    resume("node1")


def set_processes(node: str, procs: list[dict]) -> None:
    ssh(node, f"""python3 - <<'EOF'
import json, os
p = "{FAKE}"
d = json.load(open(p))
d["devices"][0]["processes"] = {json.dumps(procs)}
open(p + ".t", "w").write(json.dumps(d))
os.replace(p + ".t", p)
EOF""")


def start_job(node: str, name: str, ignore_term: bool) -> tuple[int, str]:
    """A job's process as the canary user (another uid than the guard's), named `name`."""
    body = 'trap "" TERM; ' if ignore_term else ""
    script = f"/var/tmp/{name}"
    ssh(node, f"printf '#!/bin/sh\\n{body}while :; do sleep 1; done\\n' > {script}; chmod 755 {script}")
    ssh(node, f"setsid runuser -u fleetcanary -- {script} >/dev/null 2>&1 < /dev/null &")
    time.sleep(0.5)
    # the script's own pid (runuser waits for it in a process of its own)
    real = ssh(node, f"pgrep -u fleetcanary -f '^/bin/sh {script}$'").stdout.split()
    assert len(real) == 1, real
    return int(real[0]), script


def test_memory_running_out_stops_the_largest_unprotected_gpu_process(guarded):
    hog, hog_script = start_job("node2", "hog-job", ignore_term=True)
    keep, keep_script = start_job("node2", "protected-job", ignore_term=False)
    try:
        set_processes("node2", [{"pid": hog, "used_memory": 8 << 30}, {"pid": keep, "used_memory": 16 << 30}])
        ssh("node2", f"printf 'MemAvailable: 1048576 kB\\n' > {MEMINFO}")  # 1 GiB left
        end = time.monotonic() + 20
        while time.monotonic() < end and ssh("node2", f"kill -0 {hog}", check=False).returncode == 0:
            time.sleep(0.5)
        assert ssh("node2", f"kill -0 {hog}", check=False).returncode != 0, "the hog still runs"
        assert ssh("node2", f"kill -0 {keep}", check=False).returncode == 0, "the protected job was stopped"
        ev = [e for e in events("node2") if e["event"].startswith("memory_")]
        assert [e["event"] for e in ev][:2] == ["memory_stop", "memory_kill"], ev  # TERM ignored, then KILL
        assert ev[0]["pid"] == hog and ev[0]["name"] == "hog-job" and ev[0]["footprint_mib"] >= 8192, ev[0]
        assert "DRAIN" not in node_state("node2")[0]  # memory stops a process; it does not drain
    finally:
        ssh("node2", f"printf '{HEALTHY}' > {MEMINFO}")
        set_processes("node2", [])
        ssh("node2", f"kill -9 {hog} {keep}; rm -f {hog_script} {keep_script}", check=False)


def test_a_dead_kernel_log_reader_is_started_again(guarded):
    pid = ssh("node1", "systemctl show -p MainPID --value gpu-fleet-guard.service").stdout.strip()
    child = ssh("node1", f"cat /proc/{pid}/task/*/children").stdout.split()
    assert len(child) == 1, child
    ssh("node1", f"kill -9 {child[0]}")
    time.sleep(3)
    assert any(e["event"] == "kernel_log_restarted" for e in events("node1"))
    assert json.loads(ssh("node1", "cat /run/gpu-fleet-guard/status.json").stdout)["kernel_log_alive"]


def test_a_stopped_guard_fails_the_check_and_up_refresh_brings_it_back(guarded):
    ssh("node1", "systemctl stop gpu-fleet-guard.service")
    p = ssh("node1", "python3 /opt/gpu-fleet/bin/gpu-fleet-guard --config /etc/gpu-fleet/guard.json --check",
            check=False)
    assert p.returncode == 1 and "guard on node1: no status" in p.stderr, (p.stdout, p.stderr)
    up(guarded, "--refresh")
    assert ssh("node1", "systemctl is-active gpu-fleet-guard.service").stdout.strip() == "active"


def test_destroy_removes_the_guard_and_keeps_its_event_log(guarded):
    guarded.run("destroy", "--yes", "--stack", "lab", timeout=900)
    for n in NODES:
        gone = ssh(n, "systemctl cat gpu-fleet-guard.service >/dev/null 2>&1 && echo unit; "
                      "test -e /opt/gpu-fleet/bin/gpu-fleet-guard && echo guard; "
                      "test -e /etc/gpu-fleet/guard.json && echo config; true").stdout.split()
        assert gone == [], (n, gone)
        assert [e["event"] for e in events(n)][-1] == "stop", n
