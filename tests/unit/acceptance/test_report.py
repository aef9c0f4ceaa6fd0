"""The acceptance report renderer: a golden page for a mixed report, escaping, no green for an
unbuilt criterion, and the atomic write. Regenerate the golden with GPU_FLEET_UPDATE_GOLDEN=1."""

from __future__ import annotations

import copy
import json
import os
import re

import pytest

from components.layers.acceptance.report import render_html, replace_row, write_report
from tests.unit.slurm.test_slurm_render import check_golden

def _check(name, passed, seen):
    return {"name": name, "passed": passed, "seen": seen}


def _criterion(i, title, status, layer, *evidence):
    return {"id": i, "title": title, "status": status, "layer": layer, "evidence": list(evidence)}


#: one node failed, criteria met, failed, not built and not in this stack
MIXED = {
    "stack": "lab", "generated": "2026-12-03T20:00:00Z", "slurm": "22.05",
    "partitions": {"names": ["lab"], "state": "INACTIVE"},
    "min_nodes": 3,
    "nodes": {
        "node1": {"passed": True, "jobs": ["12"], "reason": None, "checks": [
            _check("nvml", True, "8 x Tesla V100-SXM2-16GB, UUIDs as recorded"),
            _check("gres", True, "gres/gpu:v100=8")]},
        "node3": {"passed": True, "jobs": ["14"], "reason": None, "checks": [
            _check("nvml", True, "8 x Tesla V100-SXM2-16GB, UUIDs as recorded")]},
        "node2": {"passed": False, "jobs": ["13", "16"], "reason": "gpu-fleet acceptance: 7 of 8 GPUs seen",
                  "checks": [_check("nvml", False, "7 x Tesla V100-SXM2-16GB; GPU-5 & GPU-6 <missing>")]},
    },
    "fleet_job": {"job_id": "15", "nodes": ["node1", "node3"], "gpus": 16,
                  "alloc_tres": "cpu=4,gres/gpu=16,gres/gpu:v100=16", "passed": True,
                  "checks": [_check("all-reduce", True, "16 ranks, 2 nodes")]},
    "criteria": [
        _criterion(1, "All nodes and GPUs recognized by the scheduler", "met", "acceptance",
                   "node1: 8 GPUs run by 8 single-GPU job steps", "node3: 8 GPUs run by 8 single-GPU job steps"),
        _criterion(2, "Every node passes its GPU checks", "failed", "acceptance", "node2: 7 of 8 GPUs seen"),
        _criterion(3, "A job spans every node", "met", "acceptance", "job 15 on node1, node3"),
        _criterion(4, "Accounting records every job", "met", "accounting", "sacct: jobs 12-16 recorded"),
        _criterion(5, "Shared storage mounted on every node", "met", "storage", "models ro, data rw"),
        _criterion(6, "Model snapshot served", "not built", "model_snapshot"),
        _criterion(7, "Web front end answers", "not in this stack", "web"),
    ],
}


def _row_of(page: str, text: str) -> str:
    """The table row that holds `text`."""
    rows = [r for r in re.findall(r"<tr>.*?</tr>", page, re.S) if text in r]
    assert len(rows) == 1, rows
    return rows[0]


def test_golden_mixed_report():
    check_golden("acceptance.mixed.html", render_html(MIXED))


def test_summary_counts_passed_nodes_and_partition_state():
    page = render_html(MIXED)
    assert "<title>gpu-fleet acceptance: lab</title>" in page
    assert "2 of 3 nodes passed" in page
    assert "kept INACTIVE" in page and "opened" not in page
    up = copy.deepcopy(MIXED)
    up["partitions"]["state"] = "UP"
    assert "opened (UP)" in render_html(up)


def test_seen_with_script_comes_out_escaped():
    report = copy.deepcopy(MIXED)
    report["nodes"]["node1"]["checks"][0]["seen"] = '<script>alert("x")</script>'
    report["stack"] = "<b>lab</b>"
    page = render_html(report)
    assert "<script" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "<b>lab</b>" not in page and "&lt;b&gt;lab&lt;/b&gt;" in page


@pytest.mark.parametrize("status", ["not built", "not in this stack", "failed", "MET", "", None])
def test_only_met_is_green(status):
    report = copy.deepcopy(MIXED)
    report["criteria"] = [_criterion(1, "The only criterion", status, "acceptance", "evidence")]
    row = _row_of(render_html(report), "The only criterion")
    assert "green" not in row
    report["criteria"][0]["status"] = "met"
    assert 'class="badge green"' in _row_of(render_html(report), "The only criterion")


def test_not_built_criterion_in_mixed_report_is_grey():
    row = _row_of(render_html(MIXED), "Model snapshot served")
    assert 'class="badge grey"' in row and "green" not in row


def test_page_is_self_contained_and_stable():
    page = render_html(MIXED)
    assert page == render_html(copy.deepcopy(MIXED))
    for needle in ("<script", "src=", "href=", "@import", "url("):
        assert needle not in page
    # dict order is kept: node3 was given before node2
    assert page.index("<td>node3</td>") < page.index("<td>node2</td>")


def test_no_fleet_job_section_when_null():
    report = copy.deepcopy(MIXED)
    report["fleet_job"] = None
    page = render_html(report)
    assert "all-node job" not in page and "AllocTRES" not in page
    assert "cpu=4,gres/gpu=16" in render_html(MIXED)


def test_write_report_is_atomic_and_round_trips(tmp_path):
    directory = tmp_path / "reports" / "lab"
    html_path, json_path = write_report(MIXED, directory, "lab")
    assert (html_path, json_path) == (directory / "lab.html", directory / "lab.json")
    assert json.loads(json_path.read_text()) == MIXED
    assert json_path.read_text() == json.dumps(MIXED, indent=2, sort_keys=False) + "\n"
    assert html_path.read_text() == render_html(MIXED)
    assert sorted(p.name for p in directory.iterdir()) == ["lab.html", "lab.json"]
    # a second write replaces both files in place, still with nothing left over
    changed = copy.deepcopy(MIXED)
    changed["generated"] = "2026-12-04T08:00:00Z"
    write_report(changed, directory, "lab")
    assert json.loads(json_path.read_text())["generated"] == "2026-12-04T08:00:00Z"
    assert sorted(p.name for p in directory.iterdir()) == ["lab.html", "lab.json"]


def test_write_report_leaves_no_temp_file_when_a_write_fails(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_report(MIXED, tmp_path, "lab")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stack", ["", "../lab", "a/b", ".hidden"])
def test_write_report_refuses_a_stack_that_is_not_a_file_name(tmp_path, stack):
    with pytest.raises(ValueError):
        write_report(MIXED, tmp_path, stack)


def test_a_later_layer_replaces_its_row_in_both_files(tmp_path):
    assert replace_row(tmp_path, "lab", _criterion(7, "x", "met", "workload")) is None  # no report yet
    write_report(MIXED, tmp_path, "lab")
    row = _criterion(7, "The workload runs", "met", "workload", "job render 12: COMPLETED 0:0")
    html_path = replace_row(tmp_path, "lab", row)
    saved = json.loads((tmp_path / "lab.json").read_text())
    assert saved["criteria"][6] == row and saved["criteria"][:6] == MIXED["criteria"][:6]
    assert saved["nodes"] == MIXED["nodes"]
    assert "job render 12: COMPLETED 0:0" in _row_of(html_path.read_text(), "The workload runs")
