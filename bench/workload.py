"""Benchmark: the workload pipeline at the lab geometry, its wall time split by stage (issue 37,
item 7), against one node rendering the whole film.

Deploys the lab stack with storage and the workload (320x180, 24 fps, 30 s: 720 frames, three
render ranks), then reads each job's start and end as Slurm recorded them (the stack output
`workload`) and prints, per stage, the time from the previous stage's end to its own start (the
dependency's hand-over: scheduling and launch) and its run time. The comparison is what the
render would cost on one node: the same STAND-IN render of all 720 frames as one task, through
the node's task.sh, in a job of its own. Needs the lab (`python -m lab up`); the stack is
destroyed at the end (the runs and the release stay on the data store).

    .venv/bin/python bench/workload.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.lab.labhosts import repo_version, ssh  # noqa: E402
from tests.lab.test_storage import drop_datasets, set_storage  # noqa: E402
from tests.lab.test_workload import render_job  # noqa: E402
from tests.pulumi_cli import PulumiProject  # noqa: E402

STAGES = ("p0", "render", "assemble", "qa")


def at(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp)


def single_node_render(run: str) -> float:
    """The whole film as one task on one node (seconds, Slurm's start to end)."""
    job = render_job(run, "single", "320 180 24 720", "-N1 -w node1")
    while True:
        out = ssh("ctl", f"scontrol -o show job {job}").stdout
        fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
        if fields.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            assert fields["JobState"] == "COMPLETED", out
            return (at(fields["EndTime"]) - at(fields["StartTime"])).total_seconds()
        time.sleep(1)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proj = PulumiProject.copy_of_repo(Path(tmp))
        proj.init_stack("lab")
        set_storage(proj)
        path = proj.dir / "stacks" / "Pulumi.lab.yaml"
        raw = yaml.safe_load(path.read_text())
        raw["config"]["gpu-fleet:workload"] = {"enabled": True, "render": {"nodes": 3, "mem_mib": 400},
                                               "post_mem_mib": 400, "node_packages": {"zstd": repo_version("zstd")}}
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        try:
            start = time.monotonic()
            proj.run("up", "--yes", "--stack", "lab", timeout=1800)
            print(f"first up (the lab stack with storage, the acceptance and the pipeline): "
                  f"{time.monotonic() - start:.1f} s", flush=True)
            out = json.loads(proj.run("stack", "output", "--json", "--stack", "lab").stdout)["workload"]
            jobs = out["jobs"]
            print("stage     job   hand-over   run", flush=True)
            previous = None
            for s in STAGES:
                j = jobs[s]
                begin, end = at(j["start"]), at(j["end"])
                wait = (begin - previous).total_seconds() if previous else 0.0
                print(f"{s:<9} {j['id']:>4}   {wait:7.0f} s  {(end - begin).total_seconds():5.0f} s", flush=True)
                previous = end
            total = (at(jobs["qa"]["end"]) - at(jobs["p0"]["start"])).total_seconds()
            render = (at(jobs["render"]["end"]) - at(jobs["render"]["start"])).total_seconds()
            print(f"pipeline, P0's start to the release: {total:.0f} s", flush=True)
            single = single_node_render(jobs["p0"]["id"])
            print(f"render: 3 ranks {render:.0f} s; the whole film on one node {single:.0f} s "
                  f"(ratio {render / single:.2f})", flush=True)
        finally:
            proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)
            drop_datasets()


if __name__ == "__main__":
    main()
