"""A node's acceptance job, parsed and judged (node_checks.py).

The fixtures are what fleet_jobs.sh printed on the lab's Slurm 22.05 (3 nodes, 8 fake GPUs and
2 CPUs each, the job asked --mem=256): node1 and node2 healthy, then node2 again with
ConstrainDevices=no. Every other failure is the healthy node1 text with one thing changed, and
each test expects the judge to fail exactly the check that proves that thing (and name it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Optional

import pytest

from components.layers.acceptance.node_checks import (
    DRAIN_PREFIX, NodeExpect, check, cpu_count, first_failure, judge_node, parse_blocks, parse_node,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HEALTHY = (FIXTURES / "fleet_jobs_healthy.txt").read_text()
UNCONFINED = (FIXTURES / "fleet_jobs_devices_unconfined.txt").read_text()
MODEL = "Tesla V100-SXM2-16GB"

NODE1_UUIDS = (
    "GPU-6bd8593d-b8fb-5f1e-b442-7e847afb3bbf", "GPU-3cad1e3d-7fb1-58f9-a7ba-64e6e090133d",
    "GPU-912fe934-b0dc-5071-b97d-9e19e0783054", "GPU-4f121232-b2c7-56cb-a960-1ff3be663b0d",
    "GPU-4526d9a3-f72c-51ea-90cb-a8edb14b5ae5", "GPU-5fd1179c-f963-546a-b143-0164c2d2fd65",
    "GPU-6db47d10-559b-5743-aa82-b432e5070a45", "GPU-f9a6abb8-cd50-5e10-90d1-1f10730981a4",
)
NODE2_UUIDS = (
    "GPU-3cf06150-e2c8-51b4-a699-83daa411fd7e", "GPU-c5808ceb-6e6b-5af4-8b68-650ef55b297c",
    "GPU-cd5489f1-5764-5a31-b586-96a76d9873c5", "GPU-d5e9fdc3-f473-54b3-82bd-340b01a552e4",
    "GPU-ae24bf17-e7f6-5c89-821e-9602e8dc33cf", "GPU-734a6df3-93d1-5ea0-8cce-c4a30ca67131",
    "GPU-368db55e-88fc-501d-896f-76af6be71287", "GPU-d1e680c1-44d1-5af3-bf61-4853f72d9442",
)
UUIDS = {"node1": NODE1_UUIDS, "node2": NODE2_UUIDS}
RELEASED = "gpu:v100:0(IDX:N/A)"


def expect(name: str = "node1", **kw) -> NodeExpect:
    base = dict(gpus=8, gpu_type="v100", model=MODEL, uuids=UUIDS[name], cpus=2, mem_mib=256, nvml=True)
    return NodeExpect(name, **{**base, **kw})  # type: ignore[arg-type]


def node1_lines() -> list[str]:
    blocks, _, _ = parse_blocks(HEALTHY)
    return list(blocks["node1"])


def judge(lines: list[str], e: Optional[NodeExpect] = None, gres: str = RELEASED,
          oom_state: Optional[str] = None) -> dict[str, dict]:
    """The checks of node1's job (as edited) by name."""
    checks = judge_node(parse_node(lines), e or expect(), gres, oom_state)
    names = [c["name"] for c in checks]
    assert len(names) == len(set(names)), names
    return {c["name"]: c for c in checks}


def failed(checks: dict[str, dict]) -> set[str]:
    return {n for n, c in checks.items() if not c["passed"]}


def edited(change: Callable[[str], Optional[str]]) -> list[str]:
    """node1's lines with `change` applied to each (None drops the line); it must change something."""
    before = node1_lines()
    after = [m for m in (change(line) for line in before) if m is not None]
    assert after != before, "the edit changed nothing"
    return after


def replace(prefix: str, new: Optional[str]) -> Callable[[str], Optional[str]]:
    """Lines starting with `prefix` become `new` (None: dropped)."""
    return lambda line: new if line.startswith(prefix) else line


# ---- the captured outputs -------------------------------------------------------------------

def test_the_healthy_fixture_parses_to_two_nodes_and_their_gres():
    blocks, gres, not_ready = parse_blocks(HEALTHY)
    assert list(blocks) == ["node1", "node2"]
    assert gres == {"node1": RELEASED, "node2": RELEASED}
    assert not_ready is None
    # salloc's chatter is kept in the block (it is the output shown for a failed node), the
    # gres_used lines are not
    assert blocks["node1"][0] == "salloc: Granted job allocation 32"
    assert blocks["node2"][-1] == "rc=0"
    assert not any(line.startswith("gres_used=") for b in blocks.values() for line in b)


def test_parse_node_reads_every_step_of_the_healthy_job():
    s = parse_node(node1_lines())
    assert (s["job"], s["rc"], s["done"]) == ("32", "0", "1")
    inv = s["inventory"]
    assert inv["cvd"] == "0,1,2,3,4,5,6,7" and inv["cpuset"] == "0-1" and inv["mem_limit"] == "268435456"
    assert inv["cpus_on_node"] == "2" and inv["node"] == "node1" and inv["nvml_done"] == "1"
    assert [g["index"] for g in s["nvml"]] == [str(i) for i in range(8)]
    assert tuple(g["uuid"] for g in s["nvml"]) == NODE1_UUIDS
    assert {g["model"] for g in s["nvml"]} == {MODEL}
    assert s["nvml_error"] == []
    assert len(s["gpu_steps"]) == 8
    first = s["gpu_steps"][0]
    assert (first["step"], first["cvd"], first["held"]) == ("8", "0", "8")
    assert first["devices"] == {**{i: "EPERM" for i in range(7)}, 7: "ENXIO"}
    assert s["oom"]["rc"] == "1" and s["oom"]["step"] == "9"
    # srun's report carries no key, slurmstepd's has a '=' in it: both are kept as lines
    assert "srun: error: node1: task 0: Out Of Memory" in s["oom"]["lines"]
    assert any("oom-kill event(s) in StepId=32.9" in line for line in s["oom"]["lines"])
    assert s["fs"] == {"rc": "3", "jobroot": "ok"}
    assert s["residue"] == "none"


@pytest.mark.parametrize("node", ["node1", "node2"])
def test_every_check_of_a_healthy_node_passes(node):
    blocks, gres, _ = parse_blocks(HEALTHY)
    checks = judge_node(parse_node(blocks[node]), expect(node), gres[node], None)
    assert [c for c in checks if not c["passed"]] == []
    assert [c["name"] for c in checks] == [
        "job", "nvml", "visible_devices", "device_cgroup", "every_gpu_used", "cgroup_cpus", "cgroup_memory",
        "oom_confined", "job_root", "failed_job_leaves_nothing", "gpus_released"]
    assert first_failure(checks) == ""
    by_name = {c["name"]: c for c in checks}
    assert "8 x Tesla V100-SXM2-16GB" in by_name["nvml"]["seen"]
    assert "(8 of 8)" in by_name["visible_devices"]["seen"]
    assert "oom" in by_name["oom_confined"]["seen"].lower()


def test_a_node_whose_steps_could_open_every_device_fails_device_cgroup():
    blocks, gres, not_ready = parse_blocks(UNCONFINED)
    assert list(blocks) == ["node2"] and not_ready is None
    checks = judge_node(parse_node(blocks["node2"]), expect("node2"), gres["node2"], None)
    by_name = {c["name"]: c for c in checks}
    assert not by_name["device_cgroup"]["passed"]
    assert "8 of 8 single-GPU steps could open more than their GPU" in by_name["device_cgroup"]["seen"]
    # nothing proves which GPU each step was given
    assert not by_name["every_gpu_used"]["passed"]
    assert {c["name"] for c in checks if not c["passed"]} == {"device_cgroup", "every_gpu_used"}
    reason = first_failure(checks)
    assert reason.startswith("gpu-fleet acceptance: device_cgroup: ")
    assert "could open more than their GPU" in reason


# ---- nvml and CUDA_VISIBLE_DEVICES ------------------------------------------------------------

def test_a_gpu_missing_from_nvml_fails_naming_the_count_and_its_uuid():
    checks = judge(edited(replace("inventory.nvml=3 ", None)))
    assert failed(checks) == {"nvml"}
    seen = checks["nvml"]["seen"]
    assert "NVML sees 7 GPUs, the stack declares 8" in seen
    assert NODE1_UUIDS[3] in seen
    assert first_failure(list(checks.values())).startswith("gpu-fleet acceptance: nvml: NVML sees 7 GPUs")


def test_a_uuid_other_than_the_gpu_layers_record_fails_nvml():
    new = "GPU-00000000-0000-0000-0000-000000000000"
    checks = judge(edited(lambda line: line.replace(NODE1_UUIDS[5], new)))
    assert failed(checks) == {"nvml"}
    seen = checks["nvml"]["seen"]
    assert "UUIDs differ" in seen and NODE1_UUIDS[5] in seen and new in seen


def test_the_same_uuids_in_another_order_fail_nvml():
    e = expect(uuids=NODE1_UUIDS[1:2] + NODE1_UUIDS[:1] + NODE1_UUIDS[2:])
    assert failed(judge(node1_lines(), e)) == {"nvml"}


def test_another_model_fails_nvml():
    checks = judge(node1_lines(), expect(model="NVIDIA A100-SXM4-40GB"))
    assert failed(checks) == {"nvml"}
    assert "NVIDIA A100-SXM4-40GB" in checks["nvml"]["seen"]


def test_an_nvml_error_fails_nvml_with_the_error():
    lines = node1_lines()
    lines.insert(lines.index("inventory.nvml_done=1"), "inventory.nvml_error=pynvml.NVMLError_Unknown: Unknown Error")
    checks = judge(lines)
    assert failed(checks) == {"nvml"}
    assert "NVML: pynvml.NVMLError_Unknown: Unknown Error" in checks["nvml"]["seen"]


def test_without_the_gpu_layer_nvml_is_not_checked():
    checks = judge(edited(replace("inventory.nvml=", None)), expect(nvml=False, uuids=()))
    assert "nvml" not in checks and failed(checks) == set()


@pytest.mark.parametrize("cvd", ["0,1,2,3,4,5,6", "unset", ""])
def test_cuda_visible_devices_other_than_the_nodes_gpus_fails(cvd):
    checks = judge(edited(replace("inventory.cvd=", f"inventory.cvd={cvd}")))
    assert failed(checks) == {"visible_devices"}
    assert f"CUDA_VISIBLE_DEVICES={cvd} " in checks["visible_devices"]["seen"]


def test_cuda_visible_devices_unset_is_not_one_gpu():
    lines = edited(replace("inventory.cvd=", "inventory.cvd=unset"))
    one = NodeExpect("node1", gpus=1, cpus=2, mem_mib=256)
    assert not judge_node(parse_node(lines), one, RELEASED, None)[1]["passed"]
    lines = edited(replace("inventory.cvd=", "inventory.cvd=0"))
    visible = judge_node(parse_node(lines), one, RELEASED, None)[1]
    assert visible["name"] == "visible_devices" and visible["passed"]


# ---- the single-GPU steps -------------------------------------------------------------------

def _step_line(step: str) -> str:
    return next(line for line in node1_lines() if line.startswith(f"gpu.step={step} "))


def test_two_steps_opening_the_same_device_fail_every_gpu_used():
    # step 2 was given GPU 1; make it open GPU 0 (step 1's) instead
    old = _step_line("2")
    new = old.replace("0:EPERM,1:ENXIO", "0:ENXIO,1:EPERM")
    checks = judge(edited(lambda line: new if line == old else line))
    assert failed(checks) == {"every_gpu_used"}
    assert checks["device_cgroup"]["passed"]  # each step still opened exactly one device


def test_steps_that_did_not_hold_their_gpus_at_once_fail_every_gpu_used():
    checks = judge(edited(lambda line: line.replace("held=8", "held=5") if line.startswith("gpu.") else line))
    assert failed(checks) == {"every_gpu_used"}
    assert "barrier saw 5 of 8" in checks["every_gpu_used"]["seen"]


def test_a_missing_single_gpu_step_fails_every_gpu_used():
    checks = judge(edited(replace("gpu.step=5 ", None)))
    assert failed(checks) == {"every_gpu_used"}
    assert checks["every_gpu_used"]["seen"].startswith("7 single-GPU steps")


def test_no_single_gpu_step_fails_both_gpu_step_checks():
    checks = judge(edited(replace("gpu.step=", None)))
    assert failed(checks) == {"device_cgroup", "every_gpu_used"}
    assert checks["device_cgroup"]["seen"] == "no single-GPU step ran"


def test_a_step_that_could_open_two_devices_fails_device_cgroup():
    old = _step_line("1")
    new = old.replace("1:EPERM", "1:ENXIO")
    checks = judge(edited(lambda line: new if line == old else line))
    assert "device_cgroup" in failed(checks)
    assert "1 of 8 single-GPU steps could open more than their GPU (up to 2 of 8" in checks["device_cgroup"]["seen"]


def test_a_step_denied_its_own_gpu_fails():
    old = _step_line("1")
    new = old.replace("0:ENXIO", "0:EPERM")
    checks = judge(edited(lambda line: new if line == old else line))
    assert {"device_cgroup", "every_gpu_used"} <= failed(checks)


def test_an_open_result_other_than_allowed_or_eperm_fails_device_cgroup_naming_it():
    old = _step_line("4")
    new = old.replace("5:EPERM", "5:EACCES")
    checks = judge(edited(lambda line: new if line == old else line))
    assert failed(checks) == {"device_cgroup"}
    assert "device 5: EACCES" in checks["device_cgroup"]["seen"]


# ---- cgroup CPUs and memory, out of memory ----------------------------------------------------

def test_a_cpuset_smaller_than_the_node_fails_cgroup_cpus():
    checks = judge(edited(replace("inventory.cpuset=", "inventory.cpuset=0")))
    assert failed(checks) == {"cgroup_cpus"}
    assert "cpuset 0 (1 CPUs)" in checks["cgroup_cpus"]["seen"]


def test_slurm_cpus_on_node_other_than_the_node_fails_cgroup_cpus():
    assert failed(judge(edited(replace("inventory.cpus_on_node=", "inventory.cpus_on_node=1")))) == {"cgroup_cpus"}


def test_an_unreadable_cpuset_fails_cgroup_cpus():
    err = "inventory.cpuset=cat: /sys/fs/cgroup/cpuset/slurm/job_32/cpuset.effective_cpus: No such file or directory"
    checks = judge(edited(replace("inventory.cpuset=", err)))
    assert failed(checks) == {"cgroup_cpus"}
    assert "(None CPUs)" in checks["cgroup_cpus"]["seen"]


@pytest.mark.parametrize("limit", ["9223372036854771712", "max", "536870912", ""])
def test_a_memory_limit_other_than_the_jobs_mem_fails_cgroup_memory(limit):
    checks = judge(edited(replace("inventory.mem_limit=", f"inventory.mem_limit={limit}")))
    assert failed(checks) == {"cgroup_memory"}
    assert "job asked 256 MiB" in checks["cgroup_memory"]["seen"]


def test_the_memory_limit_is_compared_with_the_jobs_mem_not_a_constant():
    assert failed(judge(node1_lines(), expect(mem_mib=512))) == {"cgroup_memory"}
    lines = edited(replace("inventory.mem_limit=", "inventory.mem_limit=536870912"))
    assert failed(judge(lines, expect(mem_mib=512))) == set()


def _not_killed(line: str) -> Optional[str]:
    return None if line.startswith("oom.") and ("Out Of Memory" in line or "oom-kill" in line) else line


def test_an_oom_step_not_reported_out_of_memory_fails_oom_confined():
    checks = judge(edited(_not_killed))
    assert failed(checks) == {"oom_confined"}
    assert "not reported out of memory" in checks["oom_confined"]["seen"]


def test_an_oom_step_that_survived_fails_oom_confined():
    lines = edited(lambda line: "oom.rc=0" if line == "oom.rc=1" else _not_killed(line))
    lines.insert(lines.index("oom.step=9") + 1, "oom.survived 268435456")
    assert failed(judge(lines)) == {"oom_confined"}


def test_oom_reported_but_exit_zero_fails_oom_confined():
    assert failed(judge(edited(replace("oom.rc=", "oom.rc=0")))) == {"oom_confined"}


@pytest.mark.parametrize("state, ok", [("OUT_OF_MEMORY", True), ("OUT_OF_MEMORY+", True), ("FAILED", False),
                                       ("COMPLETED", False), ("", False)])
def test_with_accounting_the_oom_steps_sacct_state_decides(state, ok):
    # the state decides even against srun's report, either way
    for lines in (node1_lines(), edited(_not_killed)):
        checks = judge(lines, oom_state=state)
        assert checks["oom_confined"]["passed"] is ok
        assert f"sacct State={state or '(no record)'}" in checks["oom_confined"]["seen"]


# ---- storage, residue, marker -----------------------------------------------------------------

def _with_rowrite(result: str) -> list[str]:
    lines = node1_lines()
    lines.insert(lines.index("fs.jobroot=ok") + 1, f"fs.rowrite={result}")
    return lines


def test_with_a_read_only_store_erofs_passes_and_a_write_fails():
    ok = judge(_with_rowrite("EROFS"), expect(readonly=True))
    assert failed(ok) == set() and "models_read_only" in ok
    written = judge(_with_rowrite("written"), expect(readonly=True))
    assert failed(written) == {"models_read_only"}
    assert "written" in written["models_read_only"]["seen"]
    assert failed(judge(node1_lines(), expect(readonly=True))) == {"models_read_only"}  # not tried


def test_without_a_read_only_store_there_is_no_models_read_only_check():
    assert "models_read_only" not in judge(_with_rowrite("written"))


def test_a_job_root_write_that_failed_fails_job_root():
    checks = judge(edited(replace("fs.jobroot=", "fs.jobroot=failed")))
    assert failed(checks) == {"job_root"}


def test_a_failed_steps_files_left_behind_fail_failed_job_leaves_nothing():
    checks = judge(edited(replace("residue.residue=", "residue.residue=left")))
    assert failed(checks) == {"failed_job_leaves_nothing"}
    assert "left" in checks["failed_job_leaves_nothing"]["seen"]


def test_a_failing_step_that_did_not_fail_fails_failed_job_leaves_nothing():
    assert failed(judge(edited(replace("fs.rc=", "fs.rc=0")))) == {"failed_job_leaves_nothing"}


def test_the_model_marker_is_checked_only_with_a_marker():
    assert "model_marker" not in judge(node1_lines())
    assert failed(judge(node1_lines(), expect(marker=True))) == {"model_marker"}
    lines = node1_lines()
    lines.insert(lines.index("inventory.nvml_done=1") + 1, "inventory.marker=ok")
    assert failed(judge(lines, expect(marker=True))) == set()
    bad = [line.replace("marker=ok", "marker=unreadable") for line in lines]
    assert failed(judge(bad, expect(marker=True))) == {"model_marker"}


# ---- the job itself, GPUs released ----------------------------------------------------------

def test_a_job_that_did_not_reach_its_last_step_fails_job():
    checks = judge(edited(replace("done=", None)))
    assert failed(checks) == {"job"}
    assert checks["job"]["seen"] == ("job 32 exited 0, before its last step: its output stops after "
                                     "inventory, gpu (8 of 8 steps), oom, fs, residue")


def test_a_job_that_exited_non_zero_fails_job():
    checks = judge(edited(replace("rc=0", "rc=124")))
    assert failed(checks) == {"job"}
    assert "exited 124" in checks["job"]["seen"]


def test_a_job_that_never_started_fails_every_check_it_could_not_prove():
    checks = judge_node(parse_node(["salloc: error: Job submit/allocate failed: Invalid account", "rc=1"]),
                        expect(), "", None)
    by_name = {c["name"]: c for c in checks}
    assert by_name["job"]["seen"].startswith("job (none) exited 1")
    # nothing read back is nothing proven
    assert all(not c["passed"] for c in checks)


@pytest.mark.parametrize("gres", ["gpu:v100:1(IDX:0)", "gpu:8(IDX:0-7)", ""])
def test_gpus_still_in_use_after_the_job_fail_gpus_released(gres):
    checks = judge(node1_lines(), gres=gres)
    assert failed(checks) == {"gpus_released"}
    assert f"GresUsed={gres or '(not read)'}" in checks["gpus_released"]["seen"]


@pytest.mark.parametrize("gres", ["gpu:0(IDX:N/A)", "gpu:v100:0(IDX:N/A)", "gpu:a100_80g:0(IDX:N/A)"])
def test_gres_used_zero_passes_gpus_released(gres):
    assert judge(node1_lines(), gres=gres)["gpus_released"]["passed"]


def test_a_node_without_gpus_gets_no_gpu_checks():
    lines = [line for line in node1_lines() if not line.startswith(("gpu.", "inventory.nvml"))]
    lines = [line.replace("inventory.cvd=0,1,2,3,4,5,6,7", "inventory.cvd=unset") for line in lines]
    checks = judge(lines, NodeExpect("node1", gpus=0, cpus=2, mem_mib=256, nvml=True), gres="(null)")
    assert list(checks) == ["job", "cgroup_cpus", "cgroup_memory", "oom_confined", "job_root",
                            "failed_job_leaves_nothing"]
    assert failed(checks) == set()


# ---- the not-ready view ---------------------------------------------------------------------

def test_a_not_ready_block_is_the_third_value_of_parse_blocks():
    text = ("== not ready\nnode1 idle\nnode3 drained\n"
            "node3 drained gpu-fleet acceptance: nvml: NVML sees 7 GPUs, the stack declares 8\n")
    blocks, gres, not_ready = parse_blocks(text)
    assert blocks == {} and gres == {}
    assert not_ready == ("node1 idle\nnode3 drained\n"
                         "node3 drained gpu-fleet acceptance: nvml: NVML sees 7 GPUs, the stack declares 8")


def test_an_empty_not_ready_block_is_still_not_none():
    assert parse_blocks("== not ready\n")[2] == ""


def test_parse_blocks_of_nothing():
    assert parse_blocks("") == ({}, {}, None)


# ---- cpu_count, first_failure -----------------------------------------------------------------

@pytest.mark.parametrize("cpuset, count", [("0-3,8,10-11", 7), ("0", 1), ("0-1", 2), ("0-1\n", 2),
                                           ("0-79", 80), ("2,4,6", 3)])
def test_cpu_count(cpuset, count):
    assert cpu_count(cpuset) == count


@pytest.mark.parametrize("text", ["error", "", "cat: cpuset.effective_cpus: No such file or directory", "0-",
                                  "0,,1", "a-b"])
def test_cpu_count_of_what_is_not_a_cpu_list_is_none(text):
    assert cpu_count(text) is None


def test_first_failure_is_the_first_failed_check_with_the_prefix():
    checks = [check("job", True, "ok"), check("nvml", False, "NVML sees 7"), check("cgroup_cpus", False, "cpuset 0")]
    assert first_failure(checks) == f"{DRAIN_PREFIX} nvml: NVML sees 7"
    assert first_failure([check("job", True, "ok")]) == ""
    assert first_failure([]) == ""


def test_first_failure_is_at_most_200_characters():
    reason = first_failure([check("nvml", False, "x" * 1000)])
    assert len(reason) == 200 and reason.startswith("gpu-fleet acceptance: nvml: xxx")


def test_a_long_real_failure_is_cut_to_200_characters():
    lines = node1_lines()
    lines.insert(lines.index("inventory.nvml_done=1"), "inventory.nvml_error=" + "Traceback " * 60)
    lines = [line for line in lines if not line.startswith("inventory.nvml=")]
    reason = first_failure(list(judge(lines).values()))
    assert reason.startswith("gpu-fleet acceptance: nvml: NVML sees 0 GPUs") and len(reason) <= 200


def test_the_fixture_uuids_are_the_ones_in_the_text():
    """The expected lists above are the fixture's, in index order (a guard on the test data)."""
    for node, uuids in UUIDS.items():
        block = HEALTHY.split(f"== {node}\n", 1)[1]
        found = re.findall(r"^inventory\.nvml=(\d) (GPU-[0-9a-f-]+) ", block, re.M)[:8]
        assert [int(i) for i, _ in found] == list(range(8))
        assert tuple(u for _, u in found) == uuids


# ---- a job that never finished: where it stopped ---------------------------------------------

def cancelled(lines: list[str]) -> list[str]:
    """`lines` as fleet_jobs.sh reports a job it cancelled at its deadline (no done=1)."""
    return [("rc=CANCELLED 0:15" if line == "rc=0" else line) for line in lines if line != "done=1"]


def test_a_job_cancelled_in_its_single_gpu_steps_says_how_many_reported():
    kept = iter(range(100))
    # three of the eight single-GPU steps reported, then nothing: the job hung there
    lines = cancelled([line for line in node1_lines() if not line.startswith("gpu.step=") or next(kept) < 3])
    lines = lines[:max(i for i, line in enumerate(lines) if line.startswith("gpu.step=")) + 1] + ["rc=CANCELLED 0:15"]
    seen = judge(lines)["job"]["seen"]
    assert seen == ("job 32 exited CANCELLED 0:15, before its last step: its output stops after "
                    "inventory, gpu (3 of 8 steps)"), seen


def test_a_job_cancelled_after_its_residue_step_names_the_whole_trail():
    lines = cancelled(node1_lines())
    seen = judge(lines)["job"]["seen"]
    assert seen.endswith("its output stops after inventory, gpu (8 of 8 steps), oom, fs, residue"), seen
    assert first_failure(list(judge(lines).values())).startswith("gpu-fleet acceptance: job: job 32 exited")


def test_a_job_cancelled_in_a_deep_check_names_it_and_one_with_no_output_says_so():
    lines = cancelled(node1_lines()) + ["deep.diag.out=ran", "deep.diag.rc=0", "deep.nccl.out=busbw 3.1"]
    assert judge(lines)["job"]["seen"].endswith("residue, deep:diag, deep:nccl")
    assert judge(["job=40", "rc=CANCELLED 0:15"])["job"]["seen"] == (
        "job 40 exited CANCELLED 0:15, before its last step: no step printed anything")
