"""The GPU runtime layer on the lab: the real probe and the real pynvml against the fake NVML.

`python -m lab up` puts the fake libnvidia-ml (a TEST DOUBLE, lab/fake_nvml.py) on
node1..node3 with a healthy 8 x V100 configuration each. A small program
(tests/lab/programs/gpu) declares a GpuRuntime for them plus an `unreachable`
node; each test here rewrites a node's /etc/fake-nvml.json, and `pulumi refresh`
+ `up` must turn it into the right verdict, keep exactly the bad nodes out of
`healthy_nodes`, and take a fixed node back. Every node gets its healthy
configuration back after each test.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

import pytest

from components.errors import FleetError
from components.layers.gpu_runtime.component import (
    GpuBaselineProvider, INPUT_KEYS, pinned_pynvml, probe_args, probe_command,
)
from lab.fake_nvml import CONFIG as FAKE_CONFIG
from lab.fake_nvml import HELPER as FAKE_HELPER
from lab.fake_nvml import LIB_DIR as FAKE_LIB_DIR
from lab.fake_nvml import PROBE_PATHS, healthy_config
from tests.doubles.fake_nvml.harness import DRIVER, V100, device, gpu_uuid, node_config
from tests.pulumi_cli import ROOT, PulumiProject

from .labhosts import command_log

PROGRAM = Path(__file__).parent / "programs" / "gpu"
NODES = ["node1", "node2", "node3"]
PENDING = "node9"  # declared, owner unreachable: never probed, never healthy
PENDING_ADDRESS = "10.213.57.99"
PYNVML = "/opt/gpu-fleet/lib/pynvml.py"


# ---- the fake GPUs on the nodes ------------------------------------------------------------

_LAB = {}


def node_ssh(node: str, script: str, check: bool = True):
    """ssh through the lab's inventory (not the stack file, which other tests may rewrite)."""
    return _LAB["lab"].ssh(node, script, check=check)


def set_fake(node: str, config: dict) -> None:
    """Give a node another fake NVML configuration (and the kernel module files it implies)."""
    text = json.dumps(config, indent=1).replace("'", "'\\''")
    node_ssh(node, f"printf '%s\\n' '{text}' > {FAKE_CONFIG} && {FAKE_HELPER}")


def restore_healthy(nodes=NODES) -> None:
    for n in nodes:
        set_fake(n, healthy_config(n))


@pytest.fixture(scope="module")
def fake_gpus(lab):
    _LAB["lab"] = lab
    for n in NODES:
        p = node_ssh(n, f"test -f {FAKE_LIB_DIR}/STAMP && test -x {FAKE_HELPER}", check=False)
        assert p.returncode == 0, (
            f"{n}: the fake NVML test double is not installed; `python -m lab up` installs it "
            "(it needs gcc on this machine)")
    restore_healthy()
    yield lab
    restore_healthy()


@pytest.fixture
def healthy_after(fake_gpus):
    """Every node gets its healthy fake configuration back, whatever the test did."""
    yield
    restore_healthy()


def test_lab_up_installs_the_double_once(fake_gpus):
    from .conftest import lab_command

    p = lab_command("up")
    assert "fake NVML test double" not in p.stdout, p.stdout  # already there: nothing sent again
    for n in NODES:
        out = node_ssh(n, f"cat {FAKE_LIB_DIR}/README /etc/ld.so.conf.d/gpu-fleet-fake-nvml.conf; "
                          "ldconfig -p | grep -c gpu-fleet-fake-nvml; "
                          f"python3 -c 'import json; print(json.load(open(\"{FAKE_CONFIG}\"))[\"_test_double\"])'"
                          ).stdout
        assert out.count("TEST DOUBLE") == 2 and "not a GPU" in out, (n, out)


# ---- the program ---------------------------------------------------------------------------

def node_specs() -> list[dict]:
    """node1..node3 as the lab stack declares them (8 x V100), and one unreachable node."""
    lab = _LAB["lab"]
    gpus = {"count": 8, "type": "v100", "model": V100}
    specs = [{"name": n, "address": lab.host(n)["address"], "owner": "slurm", "cpus": 2,
              "real_memory_mib": 1000, "gpus": gpus} for n in NODES]
    return specs + [{**specs[0], "name": PENDING, "address": PENDING_ADDRESS,
                     "owner": "unreachable"}]


def conn(node: str) -> dict:
    """The connection input for a lab node (what components.hosts.conn_input makes of the
    lab stack), from the lab's inventory."""
    lab = _LAB["lab"]
    return {"name": node, "address": lab.host(node)["address"], "port": 22, "user": "root",
            "identity_file": str(lab.identity_file), "known_hosts_file": str(lab.known_hosts_file),
            "proxy_jump": None, "use_ssh_config": False, "connect_timeout_s": 10}


@pytest.fixture(scope="module")
def program(fake_gpus, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu")
    proj = PulumiProject.copy_of(
        tmp, [PROGRAM / "Pulumi.yaml", PROGRAM / "__main__.py", ROOT / "components"])
    proj.log = tmp / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(proj.log)
    proj.init_stack("lab", secrets=False)
    proj.run("config", "set", "nodes", json.dumps(node_specs()))
    proj.run("config", "set", "conns", json.dumps({n: conn(n) for n in NODES}))
    proj.run("config", "set", "probe_paths", json.dumps(PROBE_PATHS))
    before = {n: node_ssh(n, "ls -d /opt/gpu-fleet/lib 2>/dev/null || echo absent").stdout for n in NODES}
    proj.up(timeout=600)
    proj.first_log = command_log(proj.log)
    yield proj
    proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=600)
    for n in NODES:
        assert node_ssh(n, f"test -e {PYNVML} && echo present || echo gone").stdout.strip() == "gone"
        assert node_ssh(n, "ls -d /opt/gpu-fleet/lib 2>/dev/null || echo absent").stdout == before[n]



def reprobe(proj: PulumiProject) -> tuple[dict, str]:
    """`pulumi refresh` (re-probes: read is real) then `up` (hands the verdicts on)."""
    proj.refresh()
    up = proj.up()
    return proj.outputs(), up.stdout + up.stderr


def assert_all_healthy(out: dict) -> None:
    assert out["healthy_nodes"] == NODES, out["verdicts"]
    assert out["failed_nodes"] == [] and out["problems"] == []
    for n in NODES:
        v = out["verdicts"][n]
        assert v["verdict"] == "ok" and v["reasons"] == [], (n, v)
        assert v["count"] == 8
        assert v["uuids"] == [gpu_uuid(n, i) for i in range(8)]
        assert v["models"] == [V100]
        assert v["driver"] == DRIVER and v["kernel_module"] == DRIVER
        assert v["cuda"] == "12.9" and v["cuda_driver_version"] == 12090
        assert v["compute_capability"] == ["7.0"] and v["bf16"] is False
        # the CUDA runtime program, compiled on the node with its (fake) toolkit
        assert v["cuda_runtime"] == {"toolkit": "/usr/local/cuda", "version": "12.9",
                                     "device_count": 8, "sm70": True}, (n, v)


# ---- healthy fleet, idempotence ------------------------------------------------------------

def is_probe(cmd: str) -> bool:
    """The GPU probe's command line (`... python3 - <args>`: its script on stdin), not the
    apply's `python3 -c` that compiles pynvml."""
    return re.search(r"\bpython3 -( |$)", cmd) is not None


def test_healthy_fleet_all_ok(program):
    out = program.outputs()
    assert_all_healthy(out)
    # all UUIDs distinct across the fleet
    uuids = [u for n in NODES for u in out["verdicts"][n]["uuids"]]
    assert len(set(uuids)) == 24
    # the unreachable node: pending, never probed, never healthy
    assert out["verdicts"][PENDING]["verdict"] == "pending"
    assert PENDING in out["verdicts"][PENDING]["reasons"][0]
    assert PENDING not in out["healthy_nodes"]
    log = program.first_log
    assert not [c for c in log if c["host"] == PENDING or PENDING_ADDRESS in c["cmd"]]
    # one probe round trip per node, read-only
    probes = [c for c in log if is_probe(c["cmd"])]
    assert sorted(c["host"] for c in probes) == NODES
    assert not [c for c in probes if c["mutating"]]
    # pynvml compiled on each node by the apply (the probe writes no bytecode itself)
    compiles = [c for c in log if "py_compile" in c["cmd"]]
    assert sorted(c["host"] for c in compiles) == NODES and all(c["mutating"] for c in compiles)


def test_pinned_pynvml_is_on_every_node(program):
    pinned = pinned_pynvml()
    out = program.outputs()
    assert out["pynvml"] == {"version": pinned.version, "sha256": pinned.sha256, "path": PYNVML}
    for n in NODES:
        got = node_ssh(n, f"sha256sum {PYNVML} | cut -d' ' -f1; stat -c '%a %U %G' {PYNVML}").stdout.split("\n")
        assert got[0] == pinned.sha256 and got[1] == "644 root root", (n, got)
        # the probe's own command line loads it, and the fake NVML answers through it
        p = node_ssh(n, "PYTHONPATH=/opt/gpu-fleet/lib python3 -B -c 'import pynvml; pynvml.nvmlInit(); "
                   "print(pynvml.__file__, pynvml.nvmlDeviceGetCount())'")
        assert p.stdout.split() == [PYNVML, "8"]
        # and the probe's interpreter loads it from the bytecode the apply compiled (checked
        # against the source's hash), not from 332 KB of source compiled again
        p = node_ssh(n, "PYTHONPATH=/opt/gpu-fleet/lib PYTHONDONTWRITEBYTECODE=1 python3 -v -c 'import pynvml' 2>&1 "
                        "| grep 'code object from.*pynvml'")
        assert "/opt/gpu-fleet/lib/__pycache__/pynvml.cpython-" in p.stdout, (n, p.stdout)


def test_second_up_changes_nothing_and_sends_nothing(program):
    program.log.unlink(missing_ok=True)
    program.run("up", "--yes", "--stack", "lab", "--expect-no-changes")
    assert command_log(program.log) == []
    # up --refresh re-probes every node, read-only, and with nothing changed changes nothing
    program.up("--refresh", "--expect-no-changes")
    log = command_log(program.log)
    assert sorted(c["host"] for c in log if is_probe(c["cmd"])) == NODES
    assert log and not [c for c in log if c["mutating"]], [c for c in log if c["mutating"]]
    assert_all_healthy(program.outputs())


# ---- drifting nodes ------------------------------------------------------------------------

def duplicate_uuid() -> tuple[dict, dict, list[str]]:
    shared = gpu_uuid("node1", 5)
    devices = [device("node2", i) for i in range(8)]
    devices[3]["uuid"] = shared
    checks = {
        "node1": [f"node node1 GPU 5 UUID {shared} is also reported by node2 (GPU 3)"],
        "node2": [f"node node2 GPU 3 UUID {shared} is also reported by node1 (GPU 5)"],
    }
    return ({"node2": node_config("node2", devices=devices)}, checks,
            [f"GPU UUID {shared} is reported by both node1 (GPU 5) and node2 (GPU 3)"])


def module_mismatch() -> tuple[dict, dict, list[str]]:
    cfg = node_config("node2", kernel_module_version="570.158.01")
    return ({"node2": cfg},
            {"node2": ["node node2: driver/kernel module mismatch: user space has driver "
                       f"{DRIVER}, the loaded kernel module is 570.158.01 "
                       f"({PROBE_PATHS['nvidia_version_file']})"]},
            ["nvidia kernel module versions differ across the fleet: "
             f"{DRIVER} on node1, node3; 570.158.01 on node2"])


def seven_of_eight() -> tuple[dict, dict, list[str]]:
    return ({"node3": node_config("node3", gpus=7)},
            {"node3": ["node node3 reports 7 GPUs, the stack declares 8"]}, [])


NVML_TEXT = "NVML: Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"


def nvml_stderr() -> tuple[dict, dict, list[str]]:
    return ({"node1": node_config("node1", stderr_message=NVML_TEXT)},
            {"node1": [f'node node1: NVML printed on stderr during nvmlInit: "{NVML_TEXT}"']}, [])


def cuda_runtime_too_new() -> tuple[dict, dict, list[str]]:
    """The node's toolkit ships a CUDA 13.0 runtime; its 12.9 driver cannot serve it."""
    return ({"node3": node_config("node3", cuda_runtime_version=13000, cuda_runtime_error=35)},
            {"node3": ["node node3: CUDA cudaGetDeviceCount failed with error 35: CUDA driver "
                       "version is insufficient for CUDA runtime version (runtime 13.0, the "
                       "driver supports 12.9)"]}, [])


@pytest.mark.parametrize("scenario", [duplicate_uuid, module_mismatch, seven_of_eight, nvml_stderr,
                                      cuda_runtime_too_new],
                         ids=["duplicate-uuid", "driver-module-mismatch", "7-of-8-gpus",
                              "nvml-error-on-stderr", "cuda-runtime-newer-than-driver"])
def test_drift_is_refused_and_a_fixed_node_comes_back(program, healthy_after, scenario):
    proj = program
    configs, reasons, problems = scenario()
    bad = sorted(reasons)
    for node, cfg in configs.items():
        set_fake(node, cfg)

    # a plain `up` never touches a host: the drift is found by refresh, not by diff
    proj.log.unlink(missing_ok=True)
    proj.run("up", "--yes", "--stack", "lab", "--expect-no-changes")
    assert command_log(proj.log) == []
    assert proj.outputs()["healthy_nodes"] == NODES

    # refresh re-probes; the deployment does not fail for a failed node
    out, text = reprobe(proj)
    assert out["failed_nodes"] == bad, out["verdicts"]
    assert out["healthy_nodes"] == [n for n in NODES if n not in bad]
    for node in NODES:
        v = out["verdicts"][node]
        if node in bad:
            assert v["verdict"] == "failed"
            for reason in reasons[node]:
                assert reason in v["reasons"], (node, v["reasons"])
                assert reason in text  # the up's warning names the node and the mismatch
        else:
            assert v["verdict"] == "ok" and v["reasons"] == [], (node, v)
    for problem in problems:
        assert problem in out["problems"], out["problems"]
    assert not [c for c in command_log(proj.log) if c["mutating"]]

    # the node is fixed: refresh + up take it back
    restore_healthy(list(configs))
    out, text = reprobe(proj)
    assert_all_healthy(out)
    assert "GPU baseline" not in text


# ---- the provider directly (no engine), on the lab's nodes ---------------------------------

def provider_props(nodes: list[str], **over) -> dict:
    pinned = pinned_pynvml()
    specs = {s["name"]: s for s in node_specs()}
    props = {
        "nodes": [{"name": n, "conn": conn(n), "gpu_count": specs[n]["gpus"]["count"],
                   "gpu_model": specs[n]["gpus"]["model"]} for n in nodes],
        "pending": [], "driver_version": DRIVER, "cuda_runtime": "12.9.1",
        "required_cgroup_controllers": [], "require_ntp": False, "probe_paths": dict(PROBE_PATHS),
        "pynvml_dir": "/nonexistent/gpu-fleet", "pynvml_version": pinned.version,
        "pynvml_sha256": pinned.sha256, "probe_sha256": "x", "probe_timeout_s": 20,
        "max_parallel": 16, "triggers": {},
    }
    props.update(over)
    return props


def test_transport_error_fails_and_names_the_host(fake_gpus):
    props = provider_props(["node1", "node2"])
    props["nodes"][1]["conn"] = {**props["nodes"][1]["conn"], "port": 2222, "connect_timeout_s": 2}
    with pytest.raises(FleetError) as e:
        GpuBaselineProvider().run(props)
    msg = str(e.value)
    assert "GPU baseline: cannot probe 1 node(s) over SSH" in msg
    assert "node2" in msg and "cannot reach 10.213.57.22:2222" in msg
    assert "completed on: node1" in msg


def test_a_probe_that_does_not_answer_fails_its_node_only(fake_gpus, monkeypatch):
    # node2's "probe" hangs (as a hung NVML call would): the node-side timeout kills it
    real = __import__("components.layers.gpu_runtime.probe_source", fromlist=["probe_source"]).probe_source()
    hang = "\nimport socket, time\nif socket.gethostname() == 'node2':\n    time.sleep(60)\n"
    hung = real.replace("\nimport argparse\n", hang + "import argparse\n", 1)
    assert hung != real
    monkeypatch.setattr("components.layers.gpu_runtime.component.probe_source", lambda: hung)
    outs = GpuBaselineProvider().run(provider_props(NODES, probe_timeout_s=2))
    v = outs["verdicts"]["node2"]
    assert v["verdict"] == "failed"
    assert v["reasons"] == ["node node2: the probe did not finish within 2 s (a hung NVML call?)"]
    # the others ran (without pynvml in that directory they fail, with a document)
    assert "pynvml is not importable" in outs["verdicts"]["node1"]["reasons"][0]


def test_no_node_probed_at_all_fails(fake_gpus, monkeypatch):
    monkeypatch.setattr("components.layers.gpu_runtime.component.probe_source",
                        lambda: "import sys\nsys.stderr.write('boom\\n')\nsys.exit(3)\n")
    with pytest.raises(FleetError) as e:
        GpuBaselineProvider().run(provider_props(NODES))
    msg = str(e.value)
    assert "GPU baseline: not one node could be probed" in msg
    for n in NODES:
        assert f"node {n}: the probe exited 3: boom" in msg


# ---- pure: no host -------------------------------------------------------------------------

def test_diff_compares_inputs_only():
    p = GpuBaselineProvider()
    news = {k: None for k in INPUT_KEYS}
    news.update(nodes=[{"name": "node1", "conn": {"name": "node1", "address": "192.0.2.1"},
                        "gpu_count": 8, "gpu_model": V100}], driver_version=DRIVER,
                triggers={"a": 1})
    olds = {**copy.deepcopy(news), "verdicts": {"node1": {"verdict": "ok"}},
            "healthy_nodes": ["node1"]}
    assert p.diff("gpu-baseline", olds, news).changes is False
    # refreshed verdicts differ from what an up would compute: still no diff (no host touched)
    olds["verdicts"] = {"node1": {"verdict": "failed"}}
    olds["healthy_nodes"] = []
    assert p.diff("gpu-baseline", olds, news).changes is False
    for key, value in (("triggers", {"a": 2}), ("driver_version", "570.158.01"),
                       ("probe_paths", {"proc_modules": "/x"}), ("nodes", [])):
        changed = {**news, key: value}
        d = p.diff("gpu-baseline", olds, changed)
        assert d.changes is True and d.replaces == [], key


def test_probe_command_and_paths():
    assert probe_args(None) == []
    assert probe_args({"proc_modules": "/a", "nvidia_version_file": "/b"}) == [
        "--nvidia-version-file", "/b", "--proc-modules", "/a"]
    with pytest.raises(FleetError, match="probe_paths.kernel: unknown"):
        probe_args({"kernel": "/x"})
    with pytest.raises(FleetError, match="not an absolute path"):
        probe_args({"proc_modules": "proc/modules"})
    cmd = probe_command({"probe_timeout_s": 30, "pynvml_dir": "/opt/gpu-fleet/lib",
                         "probe_paths": {"sys_module_dir": "/s"}})
    assert cmd == ["timeout", "-k", "5", "30", "env", "PYTHONPATH=/opt/gpu-fleet/lib",
                   "PYTHONDONTWRITEBYTECODE=1", "python3", "-", "--sys-module-dir", "/s"]


def test_pinned_pynvml_is_the_venv_wheel_file():
    pinned = pinned_pynvml()
    req = (ROOT / "requirements.txt").read_text()
    assert f"nvidia-ml-py=={pinned.version}" in req
    assert hashlib.sha256(pinned.source.encode()).hexdigest() == pinned.sha256
    assert "def nvmlInit" in pinned.source
