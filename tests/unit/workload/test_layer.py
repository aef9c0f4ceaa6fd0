"""The workload layer's config rules, its pure renderers (golden batch scripts) and the pipeline
provider's parsers and verdicts. The jobs themselves run on the lab (tests/lab/test_workload.py)."""

from __future__ import annotations

import subprocess

import pytest

from components.config.load import parse_fleet_config
from components.errors import ConfigError
from components.layers.workload import pipeline, render
from components.layers.workload.config import WorkloadLayer
from tests.unit.slurm.test_slurm_render import check_golden

SRC = "stacks/Pulumi.test.yaml"
SHA = "ab" * 32


def with_workload(raw: dict, storage: bool = True, **fields) -> dict:
    if storage:
        raw["gpu-fleet:storage"] = {"enabled": True, "clients": "192.0.2.0/24"}
    raw["gpu-fleet:workload"] = {"enabled": True, **fields}
    return raw


def problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(raw, SRC)
    return exc.value.problems


def test_the_seeds_render_job_is_a_valid_workload(fleet14_config):
    cfg = parse_fleet_config(with_workload(fleet14_config, render={
        "nodes": 3, "gres": "gpu:v100:8", "cpus_per_task": 80, "mem_mib": 176 * 1024}), SRC)
    assert cfg.workload.frames == 720 and render.segments(cfg.workload) == (240, [240, 480])


def test_a_workload_without_its_store_or_acceptance_is_refused_naming_the_field(fleet14_config):
    raw = with_workload(fleet14_config, storage=False)
    raw["gpu-fleet:acceptance"] = {"enabled": False}
    found = problems(raw)
    assert any(p.startswith("gpu-fleet:workload: needs the storage layer (storage.enabled)") for p in found), found
    assert any(p.startswith("gpu-fleet:workload: needs the acceptance layer") for p in found), found


@pytest.mark.parametrize("fields, field, words", [
    ({"partition": "nope"}, "partition", "'nope' is not a Slurm partition"),
    ({"render": {"nodes": 7}}, "render.nodes", "720 frames (24 fps x 30 s) do not split into 7 whole segments"),
    ({"render": {"nodes": 20}}, "render.nodes", "20 nodes, but the fleet has"),
    ({"render": {"mem_mib": 999999}}, "render.mem_mib", "999999 MiB is more than the smallest node's"),
    ({"post_mem_mib": 999999}, "post_mem_mib", "999999 MiB is more than the smallest node's"),
    ({"thresholds": {"lufs_min": -10, "lufs_max": -20}}, "thresholds.lufs_min", "-10.0 is above lufs_max"),
])
def test_a_workload_that_cannot_run_is_refused_before_any_host(fleet14_config, fields, field, words):
    found = problems(with_workload(fleet14_config, **fields))
    mine = [p for p in found if p.startswith(f"gpu-fleet:workload.{field}: ")]
    assert mine and words in mine[0], found


@pytest.mark.parametrize("fields, where", [
    ({"render": {"gres": "gpu v100"}}, "render.gres"),
    ({"geometry": {"width": 321}}, "geometry.width"),
    ({"surprise": 1}, "surprise"),
])
def test_a_bad_value_names_its_field(fleet14_config, fields, where):
    found = problems(with_workload(fleet14_config, **fields))
    assert any(f"gpu-fleet:workload.{where}" in p for p in found), found


def lab_workload() -> WorkloadLayer:
    return WorkloadLayer(enabled=True, partition="lab", render={"nodes": 3, "mem_mib": 400}, post_mem_mib=400)


def test_golden_batch_scripts():
    w = lab_workload()
    places = render.Places.of("/srv/ai/data", "/mnt/data", SHA)
    scripts = render.batch_scripts(w, places, SHA)
    assert list(scripts) == ["p0", "render", "assemble", "qa"]
    for name, text in scripts.items():
        check_golden(f"workload.{name}.sbatch", text)
        assert subprocess.run(["sh", "-n"], input=text, text=True).returncode == 0, name


def test_the_scripts_use_the_runtime_by_hash_and_the_render_gets_its_geometry():
    w = lab_workload()
    places = render.Places.of("/srv/ai/data", "/mnt/data", SHA)
    scripts = render.batch_scripts(w, places, SHA)
    runtime = f"/mnt/data/inputs/gpu-fleet-workload/runtime-{SHA[:16]}.tar.zst {SHA}"
    assert all(f"/opt/gpu-fleet/workload/task.sh {runtime} " in t for t in scripts.values())
    assert "srun --kill-on-bad-exit=1 sh /opt/gpu-fleet/workload/task.sh" in scripts["render"]
    assert scripts["render"].rstrip().endswith("render.sh 320 180 24 240")
    assert "#SBATCH --nodes=3" in scripts["render"] and "#SBATCH --mem=400M" in scripts["render"]
    assert scripts["assemble"].rstrip().endswith("assemble.sh 3 960000")
    assert scripts["qa"].rstrip().endswith("qa.sh 240 480")
    assert not any("ffmpeg" in line for t in scripts.values() for line in t.splitlines()
                   if not line.startswith(("#", "exec")))  # no tool from the batch PATH


def test_the_epilog_is_the_layers_node_script():
    assert render.slurm_lines() == ("Epilog=/opt/gpu-fleet/workload/epilog.sh",)
    assert "epilog.sh" in render.NODE_SCRIPTS and "reap.sh" in render.NODE_SCRIPTS


# ---- the provider's parsers and verdicts --------------------------------------------------------

def test_submission_and_states_are_parsed():
    assert pipeline.parse_submit("p0=11 render=12 assemble=13 qa=14\n") == {
        "p0": "11", "render": "12", "assemble": "13", "qa": "14"}
    with pytest.raises(Exception, match="not four job ids"):
        pipeline.parse_submit("sbatch: error: Batch job submission failed\n")
    states = pipeline.parse_states("11|COMPLETED|0:0|None|2026-12-06T07:30:01|2026-12-06T07:30:09\n"
                                   "12|CANCELLED by 64200|0:15|None|2026-12-06T07:30:10|2026-12-06T07:30:12\n"
                                   "13|PENDING|0:0|DependencyNeverSatisfied|Unknown|Unknown\n14|UNKNOWN||||\n")
    assert states["12"] == {"state": "CANCELLED", "exit_code": "0:15", "reason": "None",
                            "start": "2026-12-06T07:30:10", "end": "2026-12-06T07:30:12"}
    assert states["13"]["start"] is None and states["11"]["end"] == "2026-12-06T07:30:09"
    assert states["13"]["reason"] == "DependencyNeverSatisfied" and states["14"]["state"] == "UNKNOWN"


def test_the_first_job_that_did_not_complete_is_the_cause():
    ids = {"p0": "11", "render": "12", "assemble": "13", "qa": "14"}
    ok = {"state": "COMPLETED", "exit_code": "0:0", "reason": "None"}
    cancelled = {"state": "CANCELLED", "exit_code": "0:0", "reason": "DependencyNeverSatisfied"}
    assert pipeline.first_failure(ids, {j: ok for j in ids.values()}) is None
    states = {"11": ok, "12": {"state": "FAILED", "exit_code": "4:0", "reason": "NonZeroExitCode"},
              "13": cancelled, "14": cancelled}
    assert pipeline.first_failure(ids, states) == "render"
    # COMPLETED with a non-zero exit code is no success either
    assert pipeline.first_failure(ids, {**states, "12": {**ok, "exit_code": "1:0"}}) == "render"


def test_a_failed_gate_is_named_with_its_figure_and_the_jobs_last_lines():
    ids = {"p0": "11", "render": "12", "assemble": "13", "qa": "14"}
    ok = {"state": "COMPLETED", "exit_code": "0:0", "reason": "None"}
    got = pipeline.parse_read(
        "== published\nno\n== verification\n"
        '{"passed": false, "gates": [{"name": "frames", "passed": false, "figure": 717, "problems": ["717 != 720"]},'
        ' {"name": "pts", "passed": true, "figure": 0, "problems": []}]}\n'
        "== joins\n== out 14\nFAIL frames: 717\nqa: a gate failed (gates.py exit 1): nothing published\n")
    assert not got["published"] and got["outputs"]["14"][-1].startswith("qa: a gate failed")
    states = {**{j: ok for j in ids.values()}, "14": {"state": "FAILED", "exit_code": "1:0", "reason": "None"}}
    text = pipeline.WorkloadRunProvider._failure(ids, states, pipeline.first_failure(ids, states), got)
    assert text.startswith("workload: the pipeline stopped at its qa job (14: FAILED 1:0); nothing was published")
    assert "gate frames failed: 717\n    - 717 != 720" in text and "gate pts" not in text
    assert "qa: a gate failed (gates.py exit 1): nothing published" in text


def test_a_published_release_is_read_back():
    got = pipeline.parse_read(
        "== published\nyes\n== final.done\n{\"job\": \"12\", \"film_sha256\": \"" + "c" * 64 + "\"}\n"
        "== release.sha256\n" + "c" * 64 + "  final.mp4\n" + "d" * 64 + "  verification.json\n"
        "== verification\n{\"passed\": true, \"gates\": [{\"name\": \"frames\", \"passed\": true, \"figure\": 720,"
        " \"problems\": []}]}\n== joins\n/srv/x/joins.png\n")
    assert got["published"] and got["film_sha256"] == "c" * 64 and len(got["release_sha256"]) == 2
    assert pipeline.gate_summary(got["verification"]) == {"frames": {"passed": True, "figure": 720}}
    assert got["joins"] == "/srv/x/joins.png"
