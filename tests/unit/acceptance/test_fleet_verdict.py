"""The fleet's verdict (pure parts of provider.py and criteria.py): which nodes are judged again,
the all-node job, accounting's TRES, node hashes, and the seven criteria rows built from the
nodes' checks (here the checks judge_node gave the lab's captured outputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.layers.acceptance.criteria import TITLES, Layers, criteria, workload_row
from components.layers.acceptance.node_checks import NodeExpect, check, first_failure, judge_node, parse_blocks, parse_node
from components.layers.acceptance.provider import judge_fleet_job, judge_tres, node_hash_input, to_test

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NODES = ["node1", "node2", "node3"]
CVD8 = "0,1,2,3,4,5,6,7"
TRES = "billing=6,cpu=6,gres/gpu=24,gres/gpu:v100=24,mem=768M,node=3"


def news(**hashes: str) -> dict:
    """The provider's inputs: the admitted nodes in stack order, and each one's spec."""
    return {"admitted": list(hashes), "nodes": {n: {"hash": h, "gpus": 8} for n, h in hashes.items()}}


# ---- to_test ----------------------------------------------------------------------------------

def test_on_create_every_node_is_judged_in_order():
    assert to_test({}, news(node1="a", node2="b", node3="c")) == NODES
    assert to_test({"results": None}, news(node1="a", node2="b", node3="c")) == NODES


def test_with_the_same_hashes_no_node_is_judged():
    olds = {"results": {n: {"passed": True, "hash": h} for n, h in zip(NODES, "abc")}}
    assert to_test(olds, news(node1="a", node2="b", node3="c")) == []


def test_only_the_node_whose_hash_changed_is_judged():
    olds = {"results": {n: {"passed": True, "hash": h} for n, h in zip(NODES, "abc")}}
    assert to_test(olds, news(node1="a", node2="B", node3="c")) == ["node2"]


def test_a_node_recorded_failed_with_the_same_hash_is_not_judged_again():
    olds = {"results": {"node1": {"passed": True, "hash": "a"},
                        "node2": {"passed": False, "hash": "b", "reason": "gpu-fleet acceptance: nvml: ..."}}}
    assert to_test(olds, news(node1="a", node2="b")) == []


def test_nodes_are_judged_in_stack_order_not_the_maps():
    props = news(node1="a", node2="b", node3="c")
    props["nodes"] = dict(reversed(list(props["nodes"].items())))  # a map's keys carry no order
    assert to_test({}, props) == NODES


def test_a_node_not_admitted_is_not_judged():
    props = news(node1="a", node2="b", node3="c")
    props["admitted"] = ["node1", "node3"]
    assert to_test({}, props) == ["node1", "node3"]


def test_a_node_added_since_is_judged_and_one_removed_is_not():
    olds = {"results": {"node1": {"passed": True, "hash": "a"}, "node2": {"passed": True, "hash": "b"}}}
    assert to_test(olds, news(node1="a", node3="c")) == ["node3"]


# ---- node_hash_input --------------------------------------------------------------------------

def test_node_hash_input_ignores_dict_order_and_treats_no_uuids_as_none():
    a = node_hash_input({"name": "node1", "gpus": 8}, None, {"gres": "x", "cgroup": "y"}, {"mem": 256})
    b = node_hash_input({"gpus": 8, "name": "node1"}, [], {"cgroup": "y", "gres": "x"}, {"mem": 256})
    assert a == b


@pytest.mark.parametrize("change", [
    lambda n, u, a, c: ({**n, "gpus": 7}, u, a, c),
    lambda n, u, a, c: (n, ["GPU-2", "GPU-1"], a, c),
    lambda n, u, a, c: (n, u, {**a, "gres": "z"}, c),
    lambda n, u, a, c: (n, u, a, {**c, "mem": 512}),
])
def test_node_hash_input_changes_with_each_input(change):
    args = ({"name": "node1", "gpus": 8}, ["GPU-1", "GPU-2"], {"gres": "x"}, {"mem": 256})
    assert node_hash_input(*change(*args)) != node_hash_input(*args)


# ---- the all-node job -------------------------------------------------------------------------

def ranks(*lines: tuple[str, str]) -> str:
    return "".join(f"rank={i} host={h} cvd={c} job=40\n" for i, (h, c) in enumerate(lines))


def by_name(checks: list[dict]) -> dict[str, dict]:
    return {c["name"]: c for c in checks}


def test_one_rank_on_each_node_seeing_its_gpus_passes():
    checks = judge_fleet_job(ranks(("node2", CVD8), ("node1", CVD8), ("node3", CVD8)), 0, NODES, 8)
    assert [c["name"] for c in checks] == ["all_nodes_at_once", "gpus_per_rank"]
    assert all(c["passed"] for c in checks), checks
    assert by_name(checks)["all_nodes_at_once"]["seen"] == "exit 0; 3 ranks on node1, node2, node3"


def test_a_missing_rank_fails_all_nodes_at_once():
    checks = by_name(judge_fleet_job(ranks(("node1", CVD8), ("node2", CVD8)), 0, NODES, 8))
    assert not checks["all_nodes_at_once"]["passed"]
    assert "2 ranks on node1, node2" in checks["all_nodes_at_once"]["seen"]


def test_two_ranks_on_one_node_fail_all_nodes_at_once():
    checks = by_name(judge_fleet_job(ranks(("node1", CVD8), ("node1", CVD8), ("node3", CVD8)), 0, NODES, 8))
    assert not checks["all_nodes_at_once"]["passed"]


def test_a_second_rank_on_a_node_fails_all_nodes_at_once():
    out = ranks(("node1", CVD8), ("node2", CVD8), ("node3", CVD8), ("node1", CVD8))
    checks = by_name(judge_fleet_job(out, 0, NODES, 8))
    assert not checks["all_nodes_at_once"]["passed"]
    assert "4 ranks on node1, node1, node2, node3" in checks["all_nodes_at_once"]["seen"]


def test_a_job_that_exited_non_zero_fails_even_with_every_rank():
    checks = by_name(judge_fleet_job(ranks(("node1", CVD8), ("node2", CVD8), ("node3", CVD8)), 1, NODES, 8))
    assert not checks["all_nodes_at_once"]["passed"]
    assert checks["all_nodes_at_once"]["seen"].startswith("exit 1;")


def test_a_rank_with_seven_gpus_fails_gpus_per_rank_naming_it():
    checks = by_name(judge_fleet_job(ranks(("node1", CVD8), ("node2", "0,1,2,3,4,5,6"), ("node3", CVD8)),
                                     0, NODES, 8))
    assert checks["all_nodes_at_once"]["passed"]
    assert not checks["gpus_per_rank"]["passed"]
    assert "node2: 0,1,2,3,4,5,6" in checks["gpus_per_rank"]["seen"]
    assert "node1" not in checks["gpus_per_rank"]["seen"]


def test_no_rank_at_all_fails_both():
    checks = judge_fleet_job("srun: error: Unable to allocate resources: Requested node configuration is not available\n",
                             1, NODES, 8)
    assert not any(c["passed"] for c in checks)
    assert by_name(checks)["gpus_per_rank"]["seen"] == "short: no rank ran"
    assert "no node" in by_name(checks)["all_nodes_at_once"]["seen"]


def test_lines_other_than_ranks_are_ignored():
    out = "srun: job 40 queued and waiting for resources\n" + ranks(*[(n, CVD8) for n in NODES]) + "done\n"
    assert all(c["passed"] for c in judge_fleet_job(out, 0, NODES, 8))


def test_a_cpu_only_all_node_job_passes():
    """A rank without GPUs has no CUDA_VISIBLE_DEVICES at all (cvd=unset): that is 0 GPUs."""
    checks = judge_fleet_job(ranks(*[(n, "unset") for n in NODES]), 0, NODES, 0)
    assert all(c["passed"] for c in checks), checks


# ---- accounting's TRES ------------------------------------------------------------------------

def test_generic_and_typed_gpu_tres_pass():
    c = judge_tres(TRES, "v100", 24)
    assert c["name"] == "accounted_tres" and c["passed"]
    assert c["seen"] == f"AllocTRES {TRES}; expected gres/gpu=24, gres/gpu:v100=24"


@pytest.mark.parametrize("alloc", [
    "billing=6,cpu=6,gres/gpu=24,mem=768M,node=3",  # the typed entry missing
    "billing=6,cpu=6,gres/gpu:v100=24,mem=768M,node=3",  # the generic one missing
    "billing=6,cpu=6,gres/gpu=16,gres/gpu:v100=16,mem=768M,node=3",  # too few
    "billing=6,cpu=6,gres/gpu=24,gres/gpu:a100=24,mem=768M,node=3",  # another type
    "",
])
def test_tres_without_both_counts_fails(alloc):
    c = judge_tres(alloc, "v100", 24)
    assert not c["passed"]
    assert "expected gres/gpu=24, gres/gpu:v100=24" in c["seen"]


def test_no_tres_record_is_named():
    assert judge_tres("", "v100", 24)["seen"].startswith("AllocTRES (no record);")


# ---- criteria -----------------------------------------------------------------------------------

def judged(fixture: str, expects: dict[str, NodeExpect]) -> dict[str, dict]:
    blocks, gres, _ = parse_blocks((FIXTURES / fixture).read_text())
    out = {}
    for n, e in expects.items():
        checks = judge_node(parse_node(blocks[n]), e, gres[n], None)
        out[n] = {"passed": not first_failure(checks), "checks": checks}
    return out


def healthy_nodes() -> dict[str, dict]:
    return judged("fleet_jobs_healthy.txt", {n: NodeExpect(n, gpus=8, gpu_type="v100", cpus=2, mem_mib=256)
                                             for n in ("node1", "node2")})


def unconfined_node() -> dict[str, dict]:
    return judged("fleet_jobs_devices_unconfined.txt", {"node2": NodeExpect("node2", gpus=8, cpus=2, mem_mib=256)})


def fleet_job(passed: bool = True, tres: bool | None = None) -> dict:
    checks = judge_fleet_job(ranks(("node1", CVD8), ("node2", CVD8 if passed else "0")), 0, ["node1", "node2"], 8)
    alloc = "billing=4,cpu=4,gres/gpu=16,gres/gpu:v100=16,mem=512M,node=2" if tres else "cpu=4,gres/gpu=16"
    if tres is not None:
        checks.append(judge_tres(alloc, "v100", 16))
    return {"job_id": "40", "nodes": ["node1", "node2"], "gpus": 16, "alloc_tres": alloc if tres is not None else "",
            "passed": all(c["passed"] for c in checks), "checks": checks}


def rows(nodes=None, job=None, **layers) -> dict[int, dict]:
    out = criteria(healthy_nodes() if nodes is None else nodes, job, Layers(**layers))
    assert [r["id"] for r in out] == [1, 2, 3, 4, 5, 6, 7]
    assert [r["title"] for r in out] == list(TITLES)
    return {r["id"]: r for r in out}


def test_the_fixtures_nodes_are_what_the_criteria_tests_assume():
    assert all(r["passed"] for r in healthy_nodes().values())
    assert not unconfined_node()["node2"]["passed"]
    assert fleet_job()["passed"] and not fleet_job(passed=False)["passed"]


def test_passing_nodes_and_a_passing_fleet_job_meet_rows_1_and_2():
    r = rows(job=fleet_job())
    assert r[1]["status"] == "met" and r[2]["status"] == "met"
    ev1 = "\n".join(r[1]["evidence"])
    assert "node1 job: passed: job 32 exited 0" in ev1 and "node2 gpus_released: passed:" in ev1
    assert "all-node job 40: all_nodes_at_once: exit 0; 2 ranks on node1, node2" in ev1
    assert any(e.startswith("node2 device_cgroup: passed:") for e in r[2]["evidence"])
    # row 1 carries only the recognition checks, row 2 only the confinement ones
    assert not any("device_cgroup" in e for e in r[1]["evidence"])
    assert not any(" nvml:" in e for e in r[2]["evidence"])


def test_a_refused_node_fails_row_1_with_the_refusal_first():
    r = rows(job=fleet_job(), refused={"node3": "GPU layer: 7 of 8 GPUs in nvidia-smi"})
    assert r[1]["status"] == "failed"
    assert r[1]["evidence"][0] == "node3 not admitted: GPU layer: 7 of 8 GPUs in nvidia-smi"
    assert r[2]["status"] == "met"


def test_no_all_node_job_fails_row_1():
    r = rows(job=None)
    assert r[1]["status"] == "failed"
    assert r[1]["evidence"][-1] == "no all-node job ran"


def test_a_failed_fleet_job_fails_row_1():
    r = rows(job=fleet_job(passed=False))
    assert r[1]["status"] == "failed"
    assert any("gpus_per_rank: short:" in e for e in r[1]["evidence"])


def test_no_judged_node_meets_nothing():
    r = rows(nodes={}, job=fleet_job())
    assert r[1]["status"] == "failed" and r[2]["status"] == "failed"


def test_an_unconfined_node_fails_row_2_naming_it():
    nodes = {**healthy_nodes(), **unconfined_node()}
    r = rows(nodes=nodes, job=fleet_job())
    assert r[2]["status"] == "failed"
    assert any(e.startswith("node2 device_cgroup: FAILED: 8 of 8 single-GPU steps could open more")
               for e in r[2]["evidence"])
    # every_gpu_used is a recognition check: row 1 fails too
    assert r[1]["status"] == "failed"


def test_without_storage_row_3_is_not_in_this_stack():
    r = rows(job=fleet_job())
    assert r[3]["status"] == "not in this stack" and r[3]["layer"] == "storage"
    assert r[3]["evidence"][0].startswith("no storage layer")


def test_with_storage_row_3_follows_the_storage_checks():
    assert rows(job=fleet_job(), storage=True)[3]["status"] == "met"
    nodes = healthy_nodes()
    for c in nodes["node1"]["checks"]:
        if c["name"] == "job_root":
            c["passed"] = False
    assert rows(nodes=nodes, job=fleet_job(), storage=True)[3]["status"] == "failed"


def test_accounting_with_a_passed_tres_check_meets_row_4():
    r = rows(job=fleet_job(tres=True), accounting=True)
    assert r[4]["status"] == "met"
    assert r[4]["evidence"] == ["sacct AllocTRES of job 40: billing=4,cpu=4,gres/gpu=16,gres/gpu:v100=16,mem=512M,node=2"]


def test_accounting_with_a_failed_or_missing_tres_check_fails_row_4():
    assert rows(job=fleet_job(tres=False), accounting=True)[4]["status"] == "failed"
    assert rows(job=fleet_job(), accounting=True)[4]["status"] == "failed"  # no accounted_tres check at all
    r = rows(job=None, accounting=True)
    assert r[4]["status"] == "failed" and r[4]["evidence"] == ["no all-node job ran to be accounted"]


def test_without_accounting_row_4_is_not_in_this_stack():
    assert rows(job=fleet_job(tres=True))[4]["status"] == "not in this stack"


def test_row_5_is_the_web_layers_verification():
    assert rows(job=fleet_job())[5]["status"] == "not in this stack"
    r = rows(job=fleet_job(), web="https://gpu-fleet.tailnet: 200 from 100.64.0.11, refused from 192.0.2.10")
    assert r[5]["status"] == "met"
    assert r[5]["evidence"] == ["https://gpu-fleet.tailnet: 200 from 100.64.0.11, refused from 192.0.2.10"]


def test_row_6_is_never_proven_by_an_up():
    assert rows(job=fleet_job(), k3s=True)[6]["status"] == "not proven by up"
    assert rows(job=fleet_job())[6]["status"] == "not in this stack"


@pytest.mark.parametrize("layers", [{}, {"storage": True, "accounting": True, "web": "ok", "k3s": True}])
def test_row_7_is_never_met_by_the_acceptance(layers):
    r = rows(job=fleet_job(tres=True), **layers)
    assert r[7]["status"] == "not in this stack" and r[7]["layer"] == "workload"
    r = rows(job=fleet_job(tres=True), **layers, workload=True)
    assert r[7]["status"] == "after this report" and "its run fills this row" in r[7]["evidence"][0]


RUN = {"jobs": {"p0": {"id": "11", "state": "COMPLETED", "exit_code": "0:0"},
                "render": {"id": "12", "state": "COMPLETED", "exit_code": "0:0"}},
       "release": {"dir": "/mnt/data/outputs/gpu-fleet-workload/releases/12", "film_sha256": "ab" * 32,
                   "release_sha256": ["cd" * 32 + "  final.mp4"]},
       "gates": {"frames": {"passed": True}, "motion": {"passed": True}}, "passed": True,
       "contact_sheet": "/mnt/data/outputs/gpu-fleet-workload/runs/11/joins.png"}


def test_row_7_is_the_workloads_run_with_its_evidence():
    row = workload_row(RUN)
    assert row["id"] == 7 and row["status"] == "met" and row["layer"] == "workload"
    assert row["evidence"] == [
        "job p0 11: COMPLETED 0:0", "job render 12: COMPLETED 0:0",
        f"published /mnt/data/outputs/gpu-fleet-workload/releases/12 (final.mp4 sha256 {'ab' * 32})",
        "verification: /mnt/data/outputs/gpu-fleet-workload/releases/12/verification.json",
        f"release.sha256: {'cd' * 32}  final.mp4", "2 gates passed",
        "contact sheet of the joins: /mnt/data/outputs/gpu-fleet-workload/runs/11/joins.png"]
    failed = workload_row({**RUN, "release": None, "passed": False, "gates": {"frames": {"passed": False}},
                           "why": "workload: the pipeline stopped at its qa job"})
    assert failed["status"] == "failed"
    assert "nothing published: workload: the pipeline stopped at its qa job" in failed["evidence"]
    assert "gates failed: frames" in failed["evidence"]
    # a release with a failed gate is never met (the QA job would not have published it)
    assert workload_row({**RUN, "gates": {"motion": {"passed": False}}})["status"] == "failed"


def test_everything_at_once_is_seven_rows_and_only_evidenced_ones_are_met():
    r = rows(job=fleet_job(tres=True), storage=True, accounting=True, web="ok", k3s=True)
    assert {i for i, row in r.items() if row["status"] == "met"} == {1, 2, 3, 4, 5}


def test_check_helper_shape():
    assert check("x", 1, "s") == {"name": "x", "passed": True, "seen": "s"}  # type: ignore[arg-type]
