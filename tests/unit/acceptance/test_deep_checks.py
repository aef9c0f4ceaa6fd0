"""Deep checks: commands a real fleet runs inside the acceptance jobs (dcgmi diag, NCCL's
all_reduce_perf), judged by exit code and the figure they print; their config refused early."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from components.layers.acceptance.config import AcceptanceLayer
from components.layers.acceptance.node_checks import NodeExpect, judge_deep, judge_node, parse_node
from components.layers.acceptance.provider import deep_checks

from .test_acceptance_config import canary, problems
from .test_node_checks import RELEASED, node1_lines

BW = r"Avg bus bandwidth\s*:\s*([0-9.]+)"
NCCL = {"name": "nccl", "command": "all_reduce_perf -g 8", "scope": "fleet", "figure": BW, "min_figure": 20.0,
        "timeout_s": 600}
DIAG = {"name": "diag", "command": "dcgmi diag -r 1", "scope": "node", "figure": None, "min_figure": None,
        "timeout_s": 60}


def test_exit_zero_without_a_figure_passes_and_names_the_last_line():
    c = judge_deep(DIAG, "0", ["GPU 0: Pass", "fake diag: 8 of 8 GPUs pass"])
    assert c == {"name": "deep:diag", "passed": True, "seen": "exit 0; fake diag: 8 of 8 GPUs pass"}


def test_a_failing_exit_code_fails_and_slurms_own_notes_are_not_the_evidence():
    c = judge_deep(DIAG, "1", ["fake diag: 7 of 8 GPUs pass", "srun: error: node2: task 0: Exited with exit code 1"])
    assert not c["passed"] and c["seen"] == "exit 1; fake diag: 7 of 8 GPUs pass"


@pytest.mark.parametrize("out, rc, passed, seen", [
    (["# Avg bus bandwidth    : 23.40"], "0", True, "exit 0; figure 23.4 (at least 20 needed)"),
    (["# Avg bus bandwidth    : 19.99"], "0", False, "exit 0; figure 19.99 (at least 20 needed)"),
    (["# Avg bus bandwidth    : 99.0"], "3", False, "exit 3; figure 99 (at least 20 needed)"),
    (["no summary printed"], "0", False, "exit 0; figure (not found) (at least 20 needed)"),
])
def test_a_figure_is_read_and_held_to_its_minimum(out, rc, passed, seen):
    c = judge_deep(NCCL, rc, out)
    assert c["passed"] is passed and c["seen"].startswith(seen), c


def test_a_check_that_never_ran_fails():
    assert judge_deep(DIAG, None, []) == {"name": "deep:diag", "passed": False,
                                          "seen": "did not run (the job ended before it)"}


def test_node_deep_checks_are_parsed_from_the_job_and_judged_with_the_node():
    lines = node1_lines()
    at = lines.index("done=1")
    lines[at:at] = ["deep.diag.out=GPU 0: Pass", "deep.diag.out=fake diag: 8 of 8 GPUs pass", "deep.diag.rc=0"]
    seen = parse_node(lines)
    assert seen["deep"] == {"diag": {"rc": "0", "out": ["GPU 0: Pass", "fake diag: 8 of 8 GPUs pass"]}}
    e = NodeExpect(name="node1", gpus=8, gpu_type="v100", model="Tesla V100-SXM2-16GB", cpus=2, mem_mib=256,
                   deep=(DIAG,))
    checks = {c["name"]: c for c in judge_node(seen, e, RELEASED, None)}
    assert checks["deep:diag"]["passed"]
    # the same job without the check's lines: it did not run, and the node fails on it
    e2 = NodeExpect(name="node1", gpus=8, gpu_type="v100", model="Tesla V100-SXM2-16GB", cpus=2, mem_mib=256,
                    deep=(DIAG, {**DIAG, "name": "other"}))
    checks = {c["name"]: c for c in judge_node(seen, e2, RELEASED, None)}
    assert not checks["deep:other"]["passed"]


def test_deep_checks_split_by_scope():
    props = {"deep_checks": [DIAG, NCCL]}
    assert [c["name"] for c in deep_checks(props, "node")] == ["diag"]
    assert [c["name"] for c in deep_checks(props, "fleet")] == ["nccl"]
    assert deep_checks({}, "node") == []


@pytest.mark.parametrize("bad, why", [
    ({"name": "x", "command": "c", "min_figure": 1}, "min_figure needs figure"),
    ({"name": "x", "command": "c", "figure": "([0-9]+) ([0-9]+)"}, "exactly one group"),
    ({"name": "x", "command": "c", "figure": "(["}, "not a regular expression"),
    ({"name": "X y", "command": "c"}, "a check name"),
    ({"name": "x", "command": "line\nbreak"}, "control character"),
    ({"name": "x", "command": "c", "scope": "rack"}, "scope"),
])
def test_a_bad_deep_check_is_refused_by_the_model(bad, why):
    with pytest.raises(ValidationError) as e:
        AcceptanceLayer.model_validate({"deep_checks": [bad]})
    assert why in str(e.value)


def test_two_checks_of_one_name_are_refused_naming_the_field():
    raw = canary(deep_checks=[{"name": "diag", "command": "a"}, {"name": "diag", "command": "b"}])
    assert problems(raw) == ["gpu-fleet:acceptance.deep_checks: the name 'diag' is used twice"]
