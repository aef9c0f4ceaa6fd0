"""The guards layer's pure parts and the guard daemon itself.

The decisions (heat budget, XIDs, draining once, retrying a failed drain, dry run) are tested on
`Guard` directly; the daemon as a process runs against the fake NVML (TEST DOUBLE,
tests/doubles/fake_nvml) with a kernel log that is a file, and `scontrol` a recording script (a
TEST DOUBLE of Slurm's client: the lab test, tests/lab/test_guards.py, drains through the real one).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.config import parse_fleet_config
from components.errors import ConfigError
from components.layers.guards import guard, render
from tests.conftest import stack_config
from tests.doubles.fake_nvml import harness
from tests.unit.test_slurm_render import check_golden

GUARD_PY = Path(guard.__file__)

CFG = {"node": "gpu01", "interval_s": 1, "dry_run": False, "drain_xids": [48, 79],
       "thermal": {"soak_c": 88, "soak_s": 240, "hard_c": 96}}


def make(cfg=None, fail=0):
    drained, events = [], []
    left = [fail]

    def drain(reason):
        if left[0]:
            left[0] -= 1
            return False, "slurm_update error: Unable to contact slurm controller"
        drained.append(reason)
        return True, ""

    return guard.Guard(cfg or dict(CFG), drain, events.append), drained, events


# ---- heat ---------------------------------------------------------------------------------------

def test_heat_drains_only_after_the_soak_budget_in_a_row():
    g, drained, _ = make()
    for t in range(0, 240, 10):
        g.sample(float(t), {0: 90, 1: 60}, None, [])
    assert drained == []  # 230 s above 88 C: within the budget
    g.sample(240.0, {0: 90, 1: 60}, None, [])
    assert len(drained) == 1 and drained[0].startswith("GPU 0 heat: 90 C after 240 s"), drained


def test_cooling_below_soak_restarts_the_budget():
    g, drained, _ = make()
    for t in range(0, 230, 10):
        g.sample(float(t), {0: 90}, None, [])
    g.sample(230.0, {0: 87}, None, [])  # the fans caught up
    for t in range(240, 470, 10):
        g.sample(float(t), {0: 90}, None, [])
    # the 10 s from the cool sample to the next hot one count: when it crossed is unknown, and
    # heat is counted, not guessed away
    assert drained == [] and g.soaks[0].above_s == 230


def test_after_cooling_a_new_soak_drains_again():
    g, drained, _ = make()
    g.sample(0.0, {0: 99}, None, [])
    g.sample(1.0, {0: 95}, None, [])  # still hot: the same condition
    g.sample(2.0, {0: 60}, None, [])  # cooled: an admin may resume the node
    g.sample(3.0, {0: 97}, None, [])
    assert [d.split(",")[0] for d in drained] == ["GPU 0 heat: 99 C", "GPU 0 heat: 97 C"]


def test_the_budget_counts_real_time_not_samples():
    g, drained, _ = make()
    g.sample(0.0, {0: 89}, None, [])
    g.sample(300.0, {0: 89}, None, [])  # one late sample: 300 s elapsed
    assert len(drained) == 1


def test_hard_limit_drains_at_once_and_only_once():
    g, drained, events = make()
    g.sample(0.0, {3: 97}, None, [])
    g.sample(1.0, {3: 98}, None, [])
    assert drained == ["GPU 3 heat: 97 C, at or above hard_c 96 C"]
    assert [e["event"] for e in events] == ["trip", "drained"]


# ---- XIDs and NVML -------------------------------------------------------------------------------

XID79 = "[ 4242.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID13 = "NVRM: Xid (PCI:0000:86:00): 13, pid=99, Graphics SM Warp Exception on (GPC 0, TPC 1)"


def test_parse_xid():
    assert guard.parse_xid(XID79) == (79, "PCI:0000:3b:00", "pid=1234, name=python, GPU has fallen off the bus.")
    assert guard.parse_xid("NVRM: loading NVIDIA UNIX x86_64 Kernel Module 580.173.02") is None


def test_a_hardware_xid_drains_and_an_application_xid_is_only_recorded():
    g, drained, events = make()
    g.sample(0.0, {0: 40}, None, [XID13, "usb 1-1: new device", XID79, XID79])
    assert drained == ["XID 79 on PCI:0000:3b:00"]
    assert [e["event"] for e in events] == ["xid", "trip", "drained"]
    assert events[0]["xid"] == 13 and events[0]["action"].startswith("none")
    assert g.xids_seen == 3


def test_nvml_silent_drains_fail_closed():
    g, drained, _ = make()
    g.sample(0.0, None, "GPU is lost", [])
    assert drained == ["NVML does not answer (GPU is lost): the GPUs cannot be watched"]


def test_a_failed_drain_is_tried_again_at_the_next_sample():
    g, drained, events = make(fail=2)
    g.sample(0.0, {0: 99}, None, [])
    g.sample(1.0, {0: 40}, None, [])
    assert drained == [] and g.pending
    g.sample(2.0, {0: 40}, None, [])
    assert len(drained) == 1 and not g.pending
    assert [e["event"] for e in events] == ["trip", "drain_failed", "drain_failed", "drained"]
    assert "Unable to contact" in events[1]["output"]


def test_dry_run_records_and_drains_nothing():
    g, drained, events = make({**CFG, "dry_run": True})
    g.sample(0.0, {0: 99}, None, [XID79])
    g.sample(1.0, {0: 99}, None, [XID79])
    assert drained == []
    assert [e["event"] for e in events] == ["would_drain", "would_drain"]


# ---- the kernel-log reader -----------------------------------------------------------------------

def test_a_restarted_reader_never_glues_a_cut_line_to_the_next_childs_first(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text("one\ntw")
    r = guard.LineReader(["cat", str(log)])  # exits at once: a follower that keeps dying
    got, restarted = [], 0
    for _ in range(100):
        lines, again = r.lines()
        got += lines
        restarted += again
        if r.restarts >= 2:
            break
        time.sleep(0.05)
    r.stop()
    # each child's whole line; the cut "tw" goes with the child that cut it (the next one reads
    # from the start again), never "twone"
    assert r.restarts >= 2 and restarted == r.restarts
    assert got and set(got) == {"one"}, got


# ---- the daemon, as a process --------------------------------------------------------------------

@pytest.fixture(scope="module")
def fake_nvml_lib(tmp_path_factory):
    return harness.build(tmp_path_factory.mktemp("fake-nvml")).parent


def wait_for(pred, timeout=15.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_the_daemon_drains_through_scontrol_and_logs_every_event(tmp_path, fake_nvml_lib):
    nv = tmp_path / "fake-nvml.json"
    node = harness.node_config("gpu01", gpus=2)
    nv.write_text(json.dumps(node))
    calls = tmp_path / "scontrol.calls"
    scontrol = tmp_path / "scontrol"  # TEST DOUBLE of Slurm's client: records its arguments
    scontrol.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {calls}\n")
    scontrol.chmod(0o755)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(XID13 + "\n")
    cfg = {**CFG, "interval_s": 0.2, "thermal": {"soak_c": 88, "soak_s": 1, "hard_c": 96},
           "kernel_log": str(kmsg), "event_log": str(tmp_path / "log" / "guard.jsonl"),
           "status_file": str(tmp_path / "status.json"), "scontrol": str(scontrol)}
    conf = tmp_path / "guard.json"
    conf.write_text(json.dumps(cfg))
    pynvml_dir = Path(importlib.util.find_spec("pynvml").origin).parent
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_CONFIG": str(nv),
           "PYTHONPATH": str(pynvml_dir)}
    p = subprocess.Popen([sys.executable, str(GUARD_PY), "--config", str(conf)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        status = wait_for(lambda: json.loads((tmp_path / "status.json").read_text())
                          if (tmp_path / "status.json").exists() else None)
        assert status["gpus"] == {"0": {"temp_c": 40, "above_soak_s": 0.0}, "1": {"temp_c": 40, "above_soak_s": 0.0}}
        assert status["config_sha256"] == guard.config_sha(conf.read_text()) and status["kernel_log_alive"]
        assert not calls.exists()
        node["devices"][1]["temperature"] = 90  # GPU 1 heats; the guard's NVML stays initialised
        nv.write_text(json.dumps(node))
        wait_for(calls.exists)
        assert calls.read_text().startswith("update NodeName=gpu01 State=DRAIN Reason=gpu-fleet guard: GPU 1 heat: 90 C after")
        with kmsg.open("a") as f:
            f.write(XID79[:30])
            f.flush()
            time.sleep(0.5)  # the line arrives cut: nothing happens until its rest does
            assert len(calls.read_text().splitlines()) == 1
            f.write(XID79[30:] + "\n")
        wait_for(lambda: len(calls.read_text().splitlines()) == 2)
        assert calls.read_text().splitlines()[1].endswith("Reason=gpu-fleet guard: XID 79 on PCI:0000:3b:00")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
    assert p.returncode == 0, p.stdout.read()
    events = [json.loads(x) for x in (tmp_path / "log" / "guard.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "xid", "trip", "drained", "trip", "drained", "stop"]


def test_check_proves_the_status_against_the_unit_and_the_config():
    cfg = {"interval_s": 5, "status_file": "/run/x"}
    text = "{}"
    ok = {"pid": 42, "config_sha256": guard.config_sha(text), "time": 1000.0, "kernel_log_alive": True}
    assert guard.status_problems(cfg, text, ok, "42\n", 1010.0) == []
    assert guard.status_problems(cfg, text, None, "42", 1000.0)[0].startswith("no status")
    assert "main pid is 43" in guard.status_problems(cfg, text, ok, "43", 1000.0)[0]
    assert "another config" in guard.status_problems(cfg, "{ }", ok, "42", 1000.0)[0]
    assert "stuck" in guard.status_problems(cfg, text, ok, "42", 1021.0)[0]
    assert "reader" in guard.status_problems(cfg, text, {**ok, "kernel_log_alive": False}, "42", 1000.0)[0]


# ---- config and renderers -------------------------------------------------------------------------

def guarded(**guards):
    raw = stack_config("canary")
    raw["gpu-fleet:guards"] = {"enabled": True, **guards}
    return raw


def test_golden_config_and_unit():
    cfg = parse_fleet_config(guarded(), "canary")
    node = next(n for n in cfg.slurm_nodes() if n.gpus)
    check_golden("guards.guard.json", render.render_config(cfg, node.name))
    check_golden("guards.gpu-fleet-guard.service", render.render_unit(cfg))


@pytest.mark.parametrize("guards, field, words", [
    ({"thermal": {"soak_c": 96, "hard_c": 96}}, "guards.thermal.soak_c", "not below hard_c"),
    ({"drain_xids": [79, 0]}, "guards.drain_xids", "not XIDs"),
    ({"memory": {"act_gib": 3}}, "guards.memory", "not built yet"),
    ({"kernel_log": "dmesg"}, "guards.kernel_log", "absolute path"),
    ({"interval_s": 0}, "guards.interval_s", "greater than or equal to 1"),
])
def test_bad_guards_config_names_the_field(guards, field, words):
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(guarded(**guards), "stacks/Pulumi.canary.yaml")
    text = str(exc.value)
    assert f"gpu-fleet:{field}" in text and words in text, text


def test_guards_need_slurm_and_the_gpu_layer():
    raw = guarded()
    raw["gpu-fleet:gpu_runtime"] = {"enabled": False}
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(raw, "stacks/Pulumi.canary.yaml")
    assert "gpu-fleet:guards.enabled: the guards drain nodes in Slurm" in str(exc.value)
