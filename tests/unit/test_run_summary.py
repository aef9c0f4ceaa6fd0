"""The operator's view of a large run (components/run_summary.py): the event log folded per
layer, as pure functions over event lines shaped as the CLI writes them (the integration test,
tests/integration/test_run_summary.py, reads the real CLI's)."""

from __future__ import annotations

import io
import json
import threading

from components import run_summary as rs

ST = "urn:pulumi:full::gpu-fleet::"
FLEET = "gpu-fleet:index:Fleet"


def urn(chain: str, name: str) -> str:
    return f"{ST}{chain}::{name}"


SLURM_FILE = urn(f"{FLEET}$gpu-fleet:slurm:SlurmCluster$pulumi-python:dynamic/host:File", "gpu01-slurm.conf")
STORE_DS = urn(f"{FLEET}$gpu-fleet:storage:Storage$pulumi-python:dynamic/storage:ZfsDatasets", "datasets")


def step(kind: str, op: str, u: str, host: str | None = None, planning: bool = False, old: bool = False) -> str:
    inputs = {"conn": {"name": host, "address": "192.0.2.1"}} if host else {}
    md = {"op": op, "urn": u, "type": u.split("::")[2].split("$")[-1]}
    md["old" if old else "new"] = {"inputs": inputs}
    body = {"metadata": md, **({"planning": True} if planning else {})}
    return json.dumps({"sequence": 1, "timestamp": 0, kind: body})


def test_layer_of_reads_the_component_under_fleet():
    assert rs.layer_of(SLURM_FILE) == "slurm"
    assert rs.layer_of(STORE_DS) == "storage"
    assert rs.layer_of(urn(FLEET, "full")) == "fleet"
    assert rs.layer_of(urn(f"{FLEET}$pulumi-python:dynamic/host:File", "x")) == "fleet"
    assert rs.layer_of(urn("pulumi:pulumi:Stack", "gpu-fleet-full")) == "stack"
    assert rs.layer_of(urn("pulumi:providers:pulumi-python", "default")) == "providers"
    assert rs.layer_of(urn("pulumi-python:dynamic/host:File", "n1-conf")) == "(outside Fleet)"
    assert rs.layer_of("not a urn") == "?"


def test_a_preview_is_counted_per_layer_with_the_hosts_it_changes():
    t = rs.Tally()
    for i in range(3):
        u = SLURM_FILE.replace("gpu01", f"gpu0{i}")
        t.add(step("resourcePreEvent", "create", u, f"gpu0{i}", planning=True))
        t.add(step("resOutputsEvent", "create", u, f"gpu0{i}", planning=True))
    t.add(step("resourcePreEvent", "same", STORE_DS, "storage", planning=True))
    t.add(step("resourcePreEvent", "create", urn("pulumi:pulumi:Stack", "s")))  # the root: not counted
    assert t.counts()["create"] == 3 and t.counts()["same"] == 1 and len(t.ops) == 4
    by = t.by_layer()
    assert by["slurm"][0]["create"] == 3 and by["slurm"][1] == {"gpu00", "gpu01", "gpu02"}
    assert by["storage"][0]["same"] == 1 and by["storage"][1] == set()  # unchanged: no host changed


def test_replace_steps_fold_into_one_replace_and_a_failure_sticks():
    t = rs.Tally()
    for op in ("create-replacement", "replace", "delete-replaced"):
        t.add(step("resourcePreEvent", op, SLURM_FILE, "gpu01"))
        t.add(step("resOutputsEvent", op, SLURM_FILE, "gpu01"))
    assert t.ops == {SLURM_FILE: "replace"}
    t.add(step("resourcePreEvent", "update", STORE_DS, "storage"))
    assert t.started == {STORE_DS}
    t.add(json.dumps({"resOpFailedEvent": {"metadata": {"op": "update", "urn": STORE_DS}, "status": 1}}))
    t.add(step("resOutputsEvent", "update", STORE_DS, "storage"))  # nothing after a failure un-fails it
    assert t.ops[STORE_DS] == "failed" and not t.started
    # a delete names its host from the old inputs
    gone = SLURM_FILE.replace("gpu01", "gpu09")
    t.add(step("resOutputsEvent", "delete", gone, "gpu09", old=True))
    assert t.hosts[gone] == "gpu09" and t.counts()["delete"] == 1


def test_render_lists_every_error_violation_and_unfinished_step():
    t = rs.Tally()
    t.add(step("resourcePreEvent", "create", SLURM_FILE, "gpu01"))
    t.add(step("resourcePreEvent", "create", STORE_DS, "storage"))
    t.add(step("resOutputsEvent", "create", STORE_DS, "storage"))
    err = {"diagnosticEvent": {"urn": SLURM_FILE, "message": "host gpu01: cannot reach it\n", "severity": "error"}}
    t.add(json.dumps(err))
    t.add(json.dumps(err))  # the same error twice is printed once
    t.add(json.dumps({"diagnosticEvent": {"message": "debug chatter", "severity": "debug"}}))
    t.add(json.dumps({"policyEvent": {"resourceUrn": SLURM_FILE, "message": "DisableRootJobs is not YES",
                                      "policyName": "slurm-no-root-jobs", "enforcementLevel": "mandatory"}}))
    t.add(json.dumps({"summaryEvent": {"durationSeconds": 7, "result": "failed",
                                       "PolicyPacks": {"gpu-fleet|local|policies": "0.1.0"}}}))
    t.add('{"truncated')  # a partial line is skipped, not fatal
    out = rs.render("up", "full", t, ".state/runs/x.log")
    lines = out.splitlines()
    assert lines[0] == "up of stack full: failed in 7 s; 2 resources"
    assert lines[1].split() == ["layer", "create", "hosts", "changed"]
    assert lines[2].split() == ["slurm", "1", "1"] and lines[3].split() == ["storage", "1", "1"]
    assert lines[4].split() == ["total", "2", "2"]
    assert f"1 steps began and did not end, e.g. {SLURM_FILE}" in out
    assert f"policy slurm-no-root-jobs (mandatory) on {SLURM_FILE}:\n  DisableRootJobs is not YES" in out
    assert out.count("cannot reach it") == 1 and "debug chatter" not in out
    assert "policy pack gpu-fleet@0.1.0: 1 mandatory violation(s), above" in out
    assert lines[-1] == "the CLI's own output (every resource): .state/runs/x.log"


def test_an_interrupted_run_says_the_engine_gave_no_summary():
    t = rs.Tally()
    t.add(step("resourcePreEvent", "create", STORE_DS, "storage"))
    assert rs.render("up", "full", t, "x").splitlines()[0] == (
        "up of stack full: ended without the engine's summary (interrupted?); 1 resources")


def test_progress_line_counts_what_is_done_running_and_failed():
    t = rs.Tally()
    t.add(step("resOutputsEvent", "same", STORE_DS, "storage"))
    t.add(step("resourcePreEvent", "create", SLURM_FILE, "gpu01"))
    assert rs.progress_line("up", t, 12.4) == "up: 12 s, 2 resources so far (1 create, 1 same, 1 running)"
    assert rs.progress_line("preview", rs.Tally(), 0) == "preview: 0 s, 0 resources so far (none yet)"


def test_follow_reads_lines_as_they_are_written_and_prints_progress(tmp_path):
    log = tmp_path / "events.jsonl"
    log.write_text("")
    out = io.StringIO()
    now = [0.0]
    seen = threading.Event()

    class Out(io.StringIO):
        def write(self, s: str) -> int:
            seen.set()
            return out.write(s)

    with rs.Follow(str(log), "up", Out(), every=1.0, clock=lambda: now[0]) as f:
        line = step("resOutputsEvent", "create", STORE_DS, "storage")
        with open(log, "a") as w:
            w.write(line[:20])  # half a line: not read yet
            w.flush()
            now[0] = 5.0
            assert seen.wait(10), "no progress line"
            w.write(line[20:] + "\n")
    assert f.tally.ops == {STORE_DS: "create"}  # read whole at the end
    assert out.getvalue().startswith("up: 5 s, 0 resources so far (none yet)")
