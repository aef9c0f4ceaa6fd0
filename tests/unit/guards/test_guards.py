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

from components.config.load import parse_fleet_config
from components.errors import ConfigError
from components.layers.guards import render
from components.layers.guards.onhost import guard
from tests.conftest import stack_config
from tests.doubles.fake_nvml import harness
from tests.unit.slurm.test_slurm_render import check_golden

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


def test_logged_at_reads_the_short_unix_stamp():
    assert guard.logged_at("1733212345.123456 node07 kernel: NVRM: Xid (PCI:0000:3b:00): 79") == 1733212345.123456
    assert guard.logged_at("NVRM: Xid (PCI:0000:3b:00): 79") is None


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


def test_a_lost_gpu_drains_while_the_others_are_still_watched():
    g, drained, _ = make({**CFG, "gpus": 2})
    g.sample(0.0, {0: 40}, None, [], {1: "GPU is lost"})
    g.sample(1.0, {0: 97}, None, [], {1: "GPU is lost"})
    assert drained == ["GPU 1 does not answer NVML (GPU is lost)", "GPU 0 heat: 97 C, at or above hard_c 96 C"]


def test_fewer_gpus_than_declared_drains():
    g, drained, _ = make({**CFG, "gpus": 8})
    g.sample(0.0, {i: 40 for i in range(7)}, None, [])
    g.sample(1.0, {i: 40 for i in range(7)}, None, [])
    assert drained == ["NVML sees 7 of the 8 GPUs the stack declares"]
    g.sample(2.0, {i: 40 for i in range(8)}, None, [])  # back (a reset): the next loss drains again
    g.sample(3.0, {i: 40 for i in range(6)}, None, [])
    assert drained[-1] == "NVML sees 6 of the 8 GPUs the stack declares"


def test_a_failed_drain_is_tried_again_at_the_next_sample():
    g, drained, events = make(fail=3)
    g.sample(0.0, {0: 99}, None, [])
    g.sample(1.0, {0: 40}, None, [])
    g.sample(2.0, {0: 40}, None, [])
    assert drained == [] and g.pending
    g.sample(3.0, {0: 40}, None, [])
    assert len(drained) == 1 and not g.pending
    # the same failure three times is one event, not one a sample
    assert [e["event"] for e in events] == ["trip", "drain_failed", "drained"]
    assert "Unable to contact" in events[1]["output"]


def test_dry_run_records_and_drains_nothing():
    g, drained, events = make({**CFG, "dry_run": True})
    g.sample(0.0, {0: 99}, None, [XID79])
    g.sample(1.0, {0: 99}, None, [XID79])
    assert drained == []
    assert [e["event"] for e in events] == ["would_drain", "would_drain"]


# ---- host memory ------------------------------------------------------------------------------------

MEM = {"act_mib": 3072, "warn_mib": 6144, "sustain": 3, "nvrm_errors": 5, "protect": ["VLLM::"],
       "grace_s": 20, "cooldown_s": 60, "unified_memory": True}


def proc(pid, name, rss, gpu):
    return guard.Proc(pid, f"start-{pid}", name, rss, gpu)


def memory_guard(dry=False, gone=()):
    sent, events = [], []

    def signal_(p, sig):
        if p.pid in gone:
            return False
        sent.append((p.pid, sig))
        return True

    return guard.MemoryGuard(dict(MEM), dry, events.append, signal_), sent, events


PROCS = [proc(10, "VLLM::Worker_TP0", 2000, 100000), proc(11, "python3", 3000, 40000), proc(12, "train", 9000, 0)]


def test_memory_low_for_sustain_samples_stops_the_largest_unprotected_then_kills_after_grace():
    m, sent, events = memory_guard()
    m.sample(0.0, 2000.0, [], lambda: PROCS)
    m.sample(1.0, 2000.0, [], lambda: PROCS)
    assert sent == []  # 2 samples: the sustain is 3
    m.sample(2.0, 0.0, [], lambda: PROCS)  # 0.0 MiB is a reading (seed 004), not "no reading"
    assert sent == [(11, guard.signal.SIGTERM)]  # unified: python3 43000 MiB > train 9000; VLLM:: protected
    stop = events[-1]
    assert stop["event"] == "memory_stop" and stop["name"] == "python3" and stop["footprint_mib"] == 43000
    assert [p["pid"] for p in stop["processes"]] == [10, 11, 12]  # the table before acting, largest first
    m.sample(10.0, 0.0, [], lambda: PROCS)
    assert len(sent) == 1  # neither a second stop during the grace nor during the cooldown
    m.sample(22.0, 0.0, [], lambda: PROCS)
    assert sent[-1] == (11, guard.signal.SIGKILL) and events[-1]["event"] == "memory_kill"


def test_a_process_that_left_in_the_grace_is_not_killed():
    m, sent, events = memory_guard(gone=(11,))
    m.stopping = (PROCS[1], 5.0)
    m.sample(6.0, 9000.0, [], lambda: PROCS)
    assert sent == [] and events[-1] == {"event": "memory_stopped", "pid": 11, "name": "python3", "signal": None}


def test_without_unified_memory_the_host_footprint_is_rss_only():
    m, sent, _ = memory_guard()
    m.m["unified_memory"] = False
    for t in range(3):
        m.sample(float(t), 100.0, [], lambda: PROCS)
    assert sent == [(12, guard.signal.SIGTERM)]


def test_nvrm_errors_act_below_the_warn_line_only():
    m, sent, events = memory_guard()
    m.sample(0.0, 7000.0, [1000.0] * 5, lambda: PROCS, wall=1000.0)  # above warn: errors alone do nothing
    assert sent == []
    m.sample(1.0, 5000.0, [], lambda: PROCS, wall=1061.0)  # the five are older than 60 s now
    assert sent == []
    # a reader replaying this boot's log brings old errors again: their stamps keep them old
    m.sample(2.0, 5000.0, [900.0] * 9 + [1061.5] * 4, lambda: PROCS, wall=1062.0)
    assert sent == []
    m.sample(3.0, 5000.0, [None], lambda: PROCS, wall=1063.0)  # no stamp: counted as now
    assert sent == [(11, guard.signal.SIGTERM)]
    assert "5 NVRM out-of-memory errors in 60 s" in events[-1]["reason"]


def test_only_protected_processes_is_no_target_and_dry_run_stops_nothing():
    m, sent, events = memory_guard()
    for t in range(3):
        m.sample(float(t), 100.0, [], lambda: PROCS[:1])
    assert sent == [] and events[-1]["event"] == "memory_no_target"
    m, sent, events = memory_guard(dry=True)
    for t in range(3):
        m.sample(float(t), 100.0, [], lambda: PROCS)
    assert sent == [] and events[-1]["event"] == "memory_would_stop" and events[-1]["pid"] == 11


def test_unreadable_meminfo_acts_on_nothing():
    m, sent, _ = memory_guard()
    for t in range(5):
        m.sample(float(t), None, [None] * 9, lambda: PROCS)
    assert sent == [] and m.below == 0


def test_signal_exactly_refuses_a_reused_pid():
    p = subprocess.Popen(["sleep", "30"])
    try:
        me = guard.describe(p.pid, 0.0)
        assert me is not None and me.name == "sleep"
        assert not guard.signal_exactly(guard.Proc(p.pid, "1", "sleep", 0, 0), signal.SIGTERM)
        assert p.poll() is None
        assert guard.signal_exactly(me, signal.SIGTERM)
        assert p.wait(5) == -signal.SIGTERM
    finally:
        p.kill()


def test_mem_available_reads_meminfo(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       131072000 kB\nMemFree:  1 kB\nMemAvailable:    3145728 kB\n")
    assert guard.mem_available_mib(str(f)) == 3072.0
    assert guard.mem_available_mib(str(tmp_path / "none")) is None


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
    # TEST DOUBLE of Slurm's client: records its arguments, then takes a while to return, so that
    # the SIGTERM below lands while the guard waits for the second drain
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {calls}\nsleep 1\n")
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
        assert status["gpu_errors"] == {} and status["nvml_error"] is None
        assert status["config_sha256"] == guard.config_sha(conf.read_text()) and status["kernel_log_alive"]
        assert not calls.exists()
        node["devices"][1]["temperature"] = 90  # GPU 1 heats; the guard's NVML stays initialised
        nv.write_text(json.dumps(node))
        # the double's `>>` makes the file before printf writes the line: wait for the line
        wait_for(lambda: calls.exists() and calls.read_text().endswith("\n"))
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


def start_guard(tmp_path, fake_nvml_lib, node, **cfg_over):
    nv = tmp_path / "fake-nvml.json"
    nv.write_text(json.dumps(node))
    kmsg = tmp_path / "kmsg"
    kmsg.touch()
    cfg = {**CFG, "interval_s": 0.2, "kernel_log": str(kmsg), "event_log": str(tmp_path / "log" / "guard.jsonl"),
           "status_file": str(tmp_path / "status.json"), "scontrol": "false", **cfg_over}
    conf = tmp_path / "guard.json"
    conf.write_text(json.dumps(cfg))
    pynvml_dir = Path(importlib.util.find_spec("pynvml").origin).parent
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_CONFIG": str(nv),
           "PYTHONPATH": str(pynvml_dir)}
    return subprocess.Popen([sys.executable, str(GUARD_PY), "--config", str(conf)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_the_daemon_stops_the_gpu_process_nvml_names_when_memory_runs_out(tmp_path, fake_nvml_lib):
    # TEST DOUBLES: the GPU (fake NVML lists the two processes below as on GPU 0) and MemAvailable
    # (a meminfo file); the processes, their signals and /proc are real
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
    kept = subprocess.Popen(["sleep", "60"])
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:    1024 kB\n")
    node = harness.node_config("gpu01", gpus=1)
    node["devices"][0]["processes"] = [{"pid": stubborn.pid, "used_memory": 2**33},
                                       {"pid": kept.pid, "used_memory": 2**34}]
    mem = {**MEM, "protect": ["sleep"], "sustain": 2, "grace_s": 1, "meminfo": str(meminfo)}
    g = start_guard(tmp_path, fake_nvml_lib, node, memory=mem)
    try:
        assert stubborn.wait(15) == -signal.SIGKILL  # TERM ignored: KILL after the grace
        assert kept.poll() is None  # protected by name, though the larger
    finally:
        g.send_signal(signal.SIGTERM)
        g.wait(10)
        stubborn.kill()
        kept.kill()
    events = [json.loads(x) for x in (tmp_path / "log" / "guard.jsonl").read_text().splitlines()]
    names = [e["event"] for e in events]
    assert names[:3] == ["start", "memory_stop", "memory_kill"] and names[-1] == "stop", names
    stop = events[1]
    assert stop["pid"] == stubborn.pid and stop["name"].startswith("python") and stop["signal"] == "TERM"
    assert stop["reason"].startswith("MemAvailable 1 MiB below act_mib 3072 MiB for 2 samples")


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
    check_golden("guards.guard.json", render.render_config(cfg.guards, node))
    check_golden("guards.gpu-fleet-guard.service", render.render_unit(cfg.guards, cfg.gpu_runtime.pynvml_dir))
    assert "CapabilityBoundingSet=\n" in render.render_unit(cfg.guards, cfg.gpu_runtime.pynvml_dir)  # no capability at all


def test_golden_with_the_memory_guard_which_alone_may_signal_other_users():
    cfg = parse_fleet_config(guarded(memory={"protect": ["vllm"], "unified_memory": True}), "canary")
    node = next(n for n in cfg.slurm_nodes() if n.gpus)
    check_golden("guards.memory.guard.json", render.render_config(cfg.guards, node))
    assert "CapabilityBoundingSet=CAP_KILL\n" in render.render_unit(cfg.guards, cfg.gpu_runtime.pynvml_dir)


@pytest.mark.parametrize("guards, field, words", [
    ({"thermal": {"soak_c": 96, "hard_c": 96}}, "guards.thermal.soak_c", "not below hard_c"),
    ({"drain_xids": [79, 0]}, "guards.drain_xids", "not XIDs"),
    ({"memory": {"act_gib": 3}}, "guards.memory.act_gib", "unknown field"),
    ({"memory": {"act_mib": 6144}}, "guards.memory.act_mib", "not below warn_mib"),
    ({"memory": {"meminfo": "proc/meminfo"}}, "guards.memory.meminfo", "absolute path"),
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
