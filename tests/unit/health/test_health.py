"""The health layer's pure parts and the health check as a process.

The decisions (drain, reboot, quarantine, resume, and leaving another actor's drain alone) are
tested on `decide`; the check as a process runs against the fake NVML (TEST DOUBLE,
tests/doubles/fake_nvml), a kernel log that is a file, and `scontrol` a script that answers
`show node` from a file and records the rest (a TEST DOUBLE of Slurm's client: the lab test,
tests/lab/test_health.py, runs it under the real slurmd).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.config.load import parse_fleet_config
from components.errors import ConfigError
from components.layers.health import render
from components.layers.health.onhost import healthcheck as hc
from components.layers.health.report import node_report
from components.layers.slurm.render import render_slurm_conf
from components.layers.slurm.scheduling import Scheduling
from components.layers.tenancy.render import scheduling as tenancy_scheduling
from tests.conftest import stack_config
from tests.doubles.fake_nvml import harness
from tests.unit.slurm.test_slurm_render import check_golden

CFG = {"own_reason": render.OWN_REASON, "guard_reason": render.GUARD_REASON, "reboot_on": ["xid"],
       "max_reboots_per_day": 2}
NOW = 1_800_000_000.0
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


# ---- decide ---------------------------------------------------------------------------------------

def test_a_failure_on_a_serving_node_drains_it_with_the_checks_reason():
    assert hc.decide({"mounts": ["store /mnt/data is not mounted"]}, "IDLE", "", [], NOW, CFG) == [
        ("drain", "gpu-fleet health: mounts: store /mnt/data is not mounted")]


def test_an_xid_reboots_through_slurm_then_quarantines_past_the_daily_limit():
    xid = {"xid": ["XID 79 on PCI:0000:3b:00 since this boot"]}
    guard = "gpu-fleet guard: XID 79 on PCI:0000:3b:00"
    assert hc.decide(xid, "MIXED+DRAIN", guard, [], NOW, CFG) == [
        ("reboot", "gpu-fleet health: reboot 1/2 for xid: XID 79 on PCI:0000:3b:00 since this boot")]
    # reboots older than a day do not count
    assert hc.decide(xid, "IDLE+DRAIN", guard, [NOW - 90000, NOW - 3600], NOW, CFG)[0][1].startswith(
        "gpu-fleet health: reboot 2/2")
    assert hc.decide(xid, "IDLE+DRAIN", "gpu-fleet health: reboot 2/2 for xid: ...", [NOW - 7200, NOW - 3600],
                     NOW, CFG) == [("quarantine", "gpu-fleet health: quarantined after 2 reboots in 24 h: "
                                                  "xid: XID 79 on PCI:0000:3b:00 since this boot")]


def test_a_pending_reboot_or_a_quarantine_is_left_alone():
    xid = {"xid": ["XID 79"]}
    assert hc.decide(xid, "MIXED+DRAIN+REBOOT_REQUESTED", "gpu-fleet health: reboot 1/2", [], NOW, CFG) == []
    assert hc.decide(xid, "IDLE+DRAIN+REBOOT_ISSUED", "gpu-fleet health: reboot 1/2", [], NOW, CFG) == []
    assert hc.decide({}, "IDLE+DRAIN", "gpu-fleet health: quarantined after 2 reboots", [], NOW, CFG) == []
    # lifted by an admin (Slurm keeps the reason after `scontrol reboot nextstate=RESUME`): serving
    # again, judged like any serving node
    assert hc.decide({}, "IDLE", "gpu-fleet health: quarantined after 2 reboots : reboot issued", [], NOW,
                     CFG) == []
    assert hc.decide({"xid": ["XID 79"]}, "IDLE", "gpu-fleet health: quarantined after 2 reboots", [NOW - 60],
                     NOW, CFG)[0][0] == "reboot"


def test_another_actors_drain_is_never_resumed_nor_rebooted():
    for reason in ("memtest by alice", "gpu-fleet acceptance: node2 failed"):
        assert hc.decide({}, "IDLE+DRAIN", reason, [], NOW, CFG) == []
        assert hc.decide({"xid": ["XID 79"]}, "IDLE+DRAIN", reason, [], NOW, CFG) == []
        assert hc.decide({}, "DOWN", reason, [], NOW, CFG) == []


def test_only_its_own_drain_is_resumed_once_every_check_passes():
    assert hc.decide({}, "IDLE+DRAIN", "gpu-fleet health: mounts: store /mnt/data is not mounted", [], NOW,
                     CFG) == [("resume", "")]
    assert hc.decide({}, "IDLE+DRAIN", "gpu-fleet health: reboot 1/2 for xid: XID 79", [], NOW, CFG) == [
        ("resume", "")]
    # the guard's own drain (heat) is the guard's: passing checks do not lift it
    assert hc.decide({}, "IDLE+DRAIN", "gpu-fleet guard: GPU 1 heat: 97 C", [], NOW, CFG) == []
    # its XID drain is lifted once the XID is gone from this boot (the reboot fixed it)
    assert hc.decide({}, "IDLE+DRAIN", "gpu-fleet guard: XID 79 on PCI:0000:3b:00 : reboot issued", [], NOW,
                     CFG) == [("resume", "")]
    assert hc.decide({}, "IDLE+DRAIN", "gpu-fleet guard: XID 79 on PCI:0000:3b:00", [], NOW,
                     {**CFG, "reboot_on": []}) == []
    assert hc.decide({}, "IDLE", "", [], NOW, CFG) == []


def test_a_failure_a_reboot_does_not_fix_keeps_the_guards_drain_and_renews_its_own():
    mounts = {"mounts": ["store /mnt/data is not mounted"]}
    assert hc.decide(mounts, "IDLE+DRAIN", "gpu-fleet guard: GPU 1 heat: 97 C", [], NOW, CFG) == []
    assert hc.decide(mounts, "IDLE+DRAIN", "gpu-fleet health: mounts: store /mnt/data is not mounted", [], NOW,
                     CFG) == []
    assert hc.decide(mounts, "IDLE+DRAIN", "gpu-fleet health: gpus: NVML sees 3 of the 4 GPUs", [], NOW, CFG) == [
        ("drain", "gpu-fleet health: mounts: store /mnt/data is not mounted")]


def test_without_reboots_allowed_an_xid_quarantines_at_once():
    assert hc.decide({"xid": ["XID 79"]}, "IDLE", "", [], NOW, {**CFG, "max_reboots_per_day": 0})[0][0] == "quarantine"


# ---- the reads --------------------------------------------------------------------------------------

def test_only_this_boots_hardware_xids_count():
    boot = NOW - 100
    lines = [f"{NOW - 500:.6f} node2 kernel: {XID79}",  # before this boot
             f"{NOW - 50:.6f} node2 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",  # a job's own
             f"{NOW - 40:.6f} node2 kernel: NVRM: Xid (PCI:0000:5e:00): 48, DBE"]
    assert hc.xid_failures(lines, [48, 79], boot) == ["XID 48 on PCI:0000:5e:00 since this boot"]
    assert hc.xid_failures(lines[:1], [48, 79], NOW - 600) == ["XID 79 on PCI:0000:3b:00 since this boot"]


def test_mounts_are_judged_from_the_kernels_mount_table():
    info = ("36 25 0:32 / /mnt/models ro,relatime shared:1 - fuse.nfsfuse 10.0.0.1:/models rw\n"
            "37 25 0:33 / /mnt/data rw,relatime shared:2 - ext4 /dev/vda1 rw\n")
    stores = [{"path": "/mnt/models", "source": "10.0.0.1:/models", "fstypes": ["fuse.nfsfuse"]},
              {"path": "/mnt/data", "source": "10.0.0.1:/data", "fstypes": ["fuse.nfsfuse"]},
              {"path": "/mnt/scratch", "source": "10.0.0.1:/scratch", "fstypes": ["nfs4"]}]
    assert hc.mount_failures(hc.mountinfo(info), stores) == [
        "store /mnt/data is /dev/vda1 (ext4), not 10.0.0.1:/data (fuse.nfsfuse)",
        "store /mnt/scratch is not mounted"]


def test_gpus_by_count_and_recorded_uuids():
    assert hc.gpu_failures(["GPU-a", "GPU-b"], None, 2, ["GPU-a", "GPU-b"]) == []
    assert hc.gpu_failures(["GPU-a"], None, 2, ["GPU-a", "GPU-b"]) == [
        "NVML sees 1 of the 2 GPUs the stack declares", "GPU UUIDs the GPU layer recorded are gone: GPU-b"]
    assert hc.gpu_failures(None, "NVMLError_DriverNotLoaded", 2, []) == ["NVML does not answer (NVMLError_DriverNotLoaded)"]


def test_the_guard_must_be_fresh_and_alive():
    fresh = {"time": NOW - 5, "pid": 42}
    assert hc.guard_failures(fresh, 25, NOW, lambda p: True) == []
    assert hc.guard_failures(fresh, 25, NOW, lambda p: False) == ["the guard (pid 42) is not running"]
    assert hc.guard_failures({"time": NOW - 60, "pid": 42}, 25, NOW, lambda p: True) == [
        "the guard's last sample is 60 s old"]
    assert hc.guard_failures(None, 25, NOW, lambda p: True) == ["the guard has written no status"]


def test_node_fields_keep_spaces_in_the_reason():
    f = hc.node_fields("NodeName=node2 Arch=x86_64 State=IDLE+DRAIN Reason=gpu-fleet guard: XID 79 on "
                       "PCI:0000:3b:00 [root@2026-12-05T22:00:00] Comment=(null)")
    assert f["State"] == "IDLE+DRAIN" and f["Reason"].startswith("gpu-fleet guard: XID 79 on PCI:0000:3b:00 [")


def test_result_problems_prove_slurmd_runs_this_config():
    cfg = {"result_file": "/run/x", "interval_s": 10}
    assert hc.result_problems(cfg, "abc", {"config_sha256": "abc", "time": NOW - 20}, NOW) == []
    assert hc.result_problems(cfg, "abc", {"config_sha256": "old", "time": NOW - 20}, NOW) == [
        "the last result is from another config than the one on disk"]
    assert hc.result_problems(cfg, "abc", {"config_sha256": "abc", "time": NOW - 60}, NOW) == [
        "the last result is 60 s old (interval 10 s): slurmd does not run it"]
    assert "slurmd has not run the check" in hc.result_problems(cfg, "abc", None, NOW)[0]


def test_the_report_names_state_reason_and_the_last_result():
    r = node_report({"State": "IDLE+DRAIN", "Reason": "gpu-fleet health: quarantined after 2 reboots in 24 h: xid "
                     "[root@2026-12-05T22:00:00]"}, {"ok": False, "time": NOW, "failures": {"xid": ["XID 79"]},
                                                     "actions": [{"action": "quarantine"}]}, [NOW - 10, NOW - 20])
    assert r == {"state": "IDLE+DRAIN", "reason": "gpu-fleet health: quarantined after 2 reboots in 24 h: xid",
                 "quarantined": True, "reboots": [NOW - 20, NOW - 10],
                 "check": {"ok": False, "at": NOW, "failures": {"xid": ["XID 79"]}, "actions": ["quarantine"]}}
    assert node_report({}, None, None)["check"] is None


# ---- the check as a process -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fake_nvml_lib(tmp_path_factory):
    return harness.build(tmp_path_factory.mktemp("fake-nvml")).parent


def run_check(tmp_path, fake_nvml_lib, node_state: str, *, gpus: int = 2, kmsg: str = "", **over):
    """One run as slurmd makes it; returns (exit code, result, scontrol's recorded calls)."""
    nv = tmp_path / "fake-nvml.json"
    nv.write_text(json.dumps(harness.node_config("gpu01", gpus=gpus)))
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    calls = tmp_path / "scontrol.calls"
    (tmp_path / "node.txt").write_text(f"NodeName=gpu01 Arch=x86_64 {node_state}\n")
    scontrol = bindir / "scontrol"  # TEST DOUBLE of Slurm's client
    scontrol.write_text("#!/bin/sh\n"
                        f"if [ \"$1 $2\" = 'show node' ]; then cat {tmp_path}/node.txt; exit 0; fi\n"
                        f"printf '%s\\n' \"$*\" >> {calls}\n")
    scontrol.chmod(0o755)
    (tmp_path / "kmsg").write_text(kmsg)
    uuids = [d["uuid"] for d in harness.node_config("gpu01", gpus=2)["devices"]]
    cfg = {**CFG, "node": "gpu01", "interval_s": 10, "gpus": 2, "uuids": uuids, "xids": [48, 79],
           "kernel_log": str(tmp_path / "kmsg"), "stores": [], "guard_status": None,
           "pynvml_dir": str(Path(importlib.util.find_spec("pynvml").origin).parent),
           "quarantine_reservation": "gpu-fleet-quarantine", "result_file": str(tmp_path / "run" / "last.json"),
           "state_dir": str(tmp_path / "state"), "event_log": str(tmp_path / "log" / "health.jsonl"), **over}
    conf = tmp_path / "health.json"
    conf.write_text(json.dumps(cfg))
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_CONFIG": str(nv),
           "GPU_FLEET_HEALTH_CONFIG": str(conf), "PATH": f"{bindir}:{os.environ['PATH']}"}
    p = subprocess.run([sys.executable, hc.__file__], env=env, capture_output=True, text=True, timeout=60)
    result = json.loads((tmp_path / "run" / "last.json").read_text())
    checked = subprocess.run([sys.executable, hc.__file__, "--check"], env=env, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr  # a fresh result with this config: the loop runs
    return p.returncode, result, calls.read_text().splitlines() if calls.exists() else []


def test_a_healthy_node_passes_and_nothing_is_called(tmp_path, fake_nvml_lib):
    rc, result, calls = run_check(tmp_path, fake_nvml_lib, "State=IDLE Reason=(null)")
    assert (rc, result["ok"], result["failures"], calls) == (0, True, {}, [])
    assert not (tmp_path / "log" / "health.jsonl").exists()


def test_a_lost_gpu_drains_and_an_xid_reboots_counted_on_disk(tmp_path, fake_nvml_lib):
    rc, result, calls = run_check(tmp_path, fake_nvml_lib, "State=MIXED Reason=(null)", gpus=1)
    assert rc == 1 and calls == ["update NodeName=gpu01 State=DRAIN Reason=gpu-fleet health: gpus: NVML sees 1 "
                                 "of the 2 GPUs the stack declares"]
    (tmp_path / "scontrol.calls").unlink()
    rc, result, calls = run_check(tmp_path, fake_nvml_lib, "State=MIXED+DRAIN Reason=gpu-fleet guard: XID 79 on "
                                  "PCI:0000:3b:00 [root@now]", kmsg=f"{time.time():.6f} gpu01 kernel: {XID79}\n")
    why = "gpu-fleet health: reboot 1/2 for xid: XID 79 on PCI:0000:3b:00 since this boot"
    # drained first, then a reboot without a next state: it comes back drained
    assert calls == [f"update NodeName=gpu01 State=DRAIN Reason={why}", f"reboot reason={why} gpu01"]
    assert result["reboots_24h"] == 1 and len(json.loads((tmp_path / "state" / "reboots.json").read_text())) == 1
    events = (tmp_path / "log" / "health.jsonl").read_text().splitlines()
    assert len(events) == 2 and json.loads(events[1])["actions"][0]["action"] == "reboot"


# ---- config and renderers -----------------------------------------------------------------------------

def healthy(**health):
    raw = stack_config("canary")
    raw["gpu-fleet:guards"] = {"enabled": True}
    raw["gpu-fleet:health"] = {"enabled": True, **health}
    return raw


def test_golden_config_and_slurm_conf():
    cfg = parse_fleet_config(healthy(), "canary")
    node = next(n for n in cfg.slurm_nodes() if n.gpus)
    stores = [{"path": "/mnt/models", "source": "10.0.0.1:/models", "fstypes": ["nfs", "nfs4"]}]
    check_golden("health.health.json", render.render_config(
        cfg.health, node, xids=cfg.guards.drain_xids, uuids=["GPU-b", "GPU-a"], stores=stores,
        pynvml_dir=cfg.gpu_runtime.pynvml_dir, guard_interval_s=cfg.guards.interval_s))
    sched = Scheduling(title="node health (gpu-fleet:health)", lines=render.slurm_lines(cfg.health))
    conf = render_slurm_conf(cfg.slurm, cfg.hosts.controller, cfg.slurm_nodes(), acceptance=True, scheduling=sched)
    check_golden("health.slurm.conf", conf)
    assert "HealthCheckProgram=/opt/gpu-fleet/bin/gpu-fleet-healthcheck\n" in conf


def test_two_layers_scheduling_add_up_under_their_titles():
    raw = healthy()
    cfg = parse_fleet_config(raw, "canary")
    tenancy = Scheduling(title="tenancy (gpu-fleet:tenancy)", lines=("PreemptType=preempt/qos",),
                         features={"n1": ("leaf-a",)}, files={"topology.conf": "x"})
    health = Scheduling(title="node health (gpu-fleet:health)", lines=render.slurm_lines(cfg.health))
    both = tenancy + health
    assert both.lines[:3] == ("PreemptType=preempt/qos", "", "# node health (gpu-fleet:health)")
    assert both.title == tenancy.title and both.files == tenancy.files and both.features == tenancy.features
    assert (Scheduling() + health) == health and (tenancy + Scheduling()) == tenancy
    assert tenancy_scheduling(cfg.tenancy, cfg.slurm_nodes()) + health == health  # tenancy off


@pytest.mark.parametrize("health, field, words", [
    ({"max_reboots_per_day": 7}, "health.max_reboots_per_day", "more than 6"),
    ({"reboot_on": ["xid", "heat"]}, "health.reboot_on", "'xid', 'gpus', 'mounts' or 'guard'"),
    ({"interval_s": 1}, "health.interval_s", "greater than or equal to 5"),
    ({"kernel_log": "/var/log/kmsg"}, "health.kernel_log", "the guard and the health check must read the same"),
    ({"spare": ["node2"]}, "health.spare", "unknown field"),
])
def test_bad_health_config_names_the_field(health, field, words):
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(healthy(**health), "stacks/Pulumi.canary.yaml")
    text = str(exc.value)
    assert f"gpu-fleet:{field}" in text and words in text, text


def test_health_needs_slurm_and_the_gpu_layer():
    raw = healthy()
    raw["gpu-fleet:gpu_runtime"] = {"enabled": False}
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(raw, "stacks/Pulumi.canary.yaml")
    assert "gpu-fleet:health.enabled: the health check runs under slurmd" in str(exc.value)
