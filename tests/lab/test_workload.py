"""The workload layer on the lab: the seed's render pipeline as four Slurm jobs (P0, a render across
the three nodes with afterok:P0, the assembly, the gates and publication), its film judged by the
real gates with the runtime's pinned ffmpeg, published by one rename and rolled back by one.

STAND-IN for the video model: onhost/render.sh (a deterministic generator of picture and sound,
a pure function of global time, so the three ranks' segments meet at their joins). TEST DOUBLES,
as everywhere in the lab: the GPUs (fake device files and NVML) and the NFS client (nfsfuse).
Real: slurmctld and slurmd 22.05, the dependencies, srun's ranks, the Epilog, nfs-ganesha over
zfs-fuse, ffmpeg 7.0.2 (static), the gates.

One stack, in order: the pipeline publishes once; a second `up` submits nothing; a render killed
outright leaves no runtime and no process on any node (the Epilog); a gate that fails publishes
nothing and names the gate; the seed's failures (a runtime changed after P0, and the render-side
ones as FAULTS, render commands of workload_faults/ that make the seed's mistakes) each stop the
pipeline with nothing published and a sentence naming the cause; destroy renames the release and
nothing else changes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.pulumi_cli import PulumiProject

from .labhosts import repo_version, ssh
from .test_slurm_cluster import NODES
from .test_storage import set_storage

SERVER = "/srv/ai/data/outputs/gpu-fleet-workload"
RUNS, RELEASES = f"{SERVER}/runs", f"{SERVER}/releases"
NODE_BASE = "/var/tmp/gpu-fleet-workload"
FAULTS = Path(__file__).with_name("workload_faults")
RELEASE_FILES = ["final.done", "final.mp4", "release.sha256", "verification.json"]


def set_workload(proj: PulumiProject, **fields) -> None:
    path = proj.dir / "stacks" / "Pulumi.lab.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["config"]["gpu-fleet:workload"] = {**raw["config"].get("gpu-fleet:workload", {}), **fields}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def tree(path: str) -> dict[str, str]:
    """Every file under a path on the storage host -> its SHA-256."""
    out = ssh("storage", f"cd {path} && find . -type f -exec sha256sum {{}} + | sort", check=False).stdout
    return {line.split()[1]: line.split()[0] for line in out.splitlines()}


def report_row(proj: PulumiProject) -> dict:
    """Criterion 7 of the acceptance report beside the project's state."""
    report = json.loads((proj.dir / ".state" / "artifacts" / "acceptance" / "lab.json").read_text())
    [row] = [c for c in report["criteria"] if c["id"] == 7]
    return row


def leftovers() -> dict[str, str]:
    """Per node: what is left of any workload job (its directories, processes from them)."""
    found = {}
    for n in NODES:
        out = ssh(n, f"ls -A {NODE_BASE} 2>/dev/null; for p in /proc/[0-9]*; do "
                     f"case $(readlink $p/exe 2>/dev/null) in {NODE_BASE}/*) echo pid ${{p#/proc/}};; esac; done",
                  check=False).stdout.strip()
        if out:
            found[n] = out
    return found


def stack_runtime() -> tuple[str, str]:
    """The runtime archive the stack's render job uses (its path on the nodes) and its SHA-256."""
    archive = ssh("ctl", "sed -n 's/.*task.sh \\([^ ]*\\) \\([0-9a-f]\\{64\\}\\) .*/\\1 \\2/p' "
                         "/etc/gpu-fleet/workload/render").stdout.split()
    assert len(archive) == 2, archive
    return archive[0], archive[1]


def render_job(run: str, name: str, args: str, shape: str, archive: str = "", out: str = "/dev/null") -> str:
    """A job of the stand-in render through every node's task.sh with the stack's runtime (as
    the layer's render job runs it; `archive`: another file in its place, checked against the
    stack's hash), its segments under the run's directory; its id."""
    path, sha = stack_runtime()
    media = f"/mnt/data/outputs/gpu-fleet-workload/runs/{run}/{name}"
    script = (f"#!/bin/sh\nmkdir -p {media}\nMEDIA_DIR={media} exec srun sh /opt/gpu-fleet/workload/task.sh "
              f"{archive or path} {sha} render.sh {args}\n")
    ssh("ctl", f"cat > /tmp/gf-{name}.sh <<'EOF'\n{script}EOF\nchmod 644 /tmp/gf-{name}.sh")
    return ssh("ctl", f"cd /tmp && runuser -u fleetcanary -- sbatch --parsable {shape} --mem=400M -o {out} "
                      f"/tmp/gf-{name}.sh").stdout.strip()


def wait_gone(job: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while ssh("ctl", f"squeue -h -j {job} -o %i", check=False).stdout.strip():
        assert time.monotonic() < deadline, f"job {job} still queued or running"
        time.sleep(1)


@pytest.fixture(scope="module")
def workload(lab, deployed, tmp_path_factory):
    proj = deployed.project(tmp_path_factory.mktemp("workload"))
    set_storage(proj)
    set_workload(proj, enabled=True, render={"nodes": 3, "mem_mib": 400}, post_mem_mib=400, timeout_s=900,
                 node_packages={"zstd": repo_version("zstd")})
    proj.up(timeout=1800)
    return proj


def test_the_pipeline_renders_on_three_nodes_gates_and_publishes_once(workload):
    out = workload.outputs()["workload"]
    jobs = out["jobs"]
    assert [jobs[s]["state"] for s in ("p0", "render", "assemble", "qa")] == ["COMPLETED"] * 4, jobs
    assert all(j["exit_code"] == "0:0" for j in jobs.values()), jobs
    # each rank printed the geometry it received before rendering, one segment a node
    render_out = ssh("storage", f"cat {RUNS}/slurm-{jobs['render']['id']}.out").stdout
    for k in range(3):
        assert f"request_geometry 320x180 fps=24 frames=240 segment={k}/3 first_frame={240 * k}" in render_out
    p0_out = ssh("storage", f"cat {RUNS}/slurm-{jobs['p0']['id']}.out").stdout
    assert "preflight ok ffmpeg version 7.0.2-static" in p0_out, p0_out
    # the release: exactly its four files, matching release.sha256 and the stack output
    release = out["release"]
    server = f"{RELEASES}/{release['job']}"
    assert release["job"] == jobs["render"]["id"]
    assert sorted(tree(server)) == [f"./{f}" for f in RELEASE_FILES]
    ssh("storage", f"cd {server} && sha256sum -c --strict --quiet release.sha256")
    film = ssh("storage", f"sha256sum {server}/final.mp4").stdout.split()[0]
    assert release["film_sha256"] == film
    verification = json.loads(ssh("storage", f"cat {server}/verification.json").stdout)
    figures = {g["name"]: g["figure"] for g in verification["gates"]}
    assert verification["passed"] and figures["frames"] == 720, figures
    assert figures["audio_end"] == {"ticks": 960000, "rate": 32000}
    assert out["passed"] and set(out["gates"]) == set(figures) and all(g["passed"] for g in out["gates"].values())
    # the evidence beside it: the joins' contact sheet (two joins, four frames each)
    sheet = ssh("storage", f"head -c 24 {RUNS}/{jobs['p0']['id']}/joins.png | od -An -tx1").stdout.split()
    assert sheet[:8] == ["89", "50", "4e", "47", "0d", "0a", "1a", "0a"]
    assert int("".join(sheet[16:20]), 16) == 4 * 320 and int("".join(sheet[20:24]), 16) == 2 * 180
    # every task removed its own runtime: nothing is left on any node
    assert leftovers() == {}
    # criterion 7 of the acceptance report, filled by this run with its evidence
    row = report_row(workload)
    assert row["status"] == "met" and f"job render {jobs['render']['id']}: COMPLETED 0:0" in row["evidence"], row
    assert f"verification: {release['dir']}/verification.json" in row["evidence"]
    assert f"contact sheet of the joins: {out['contactSheet']}" in row["evidence"]
    assert workload.outputs()["acceptance"]["criteria"]["7"] == "met"


def test_a_second_up_submits_nothing(workload):
    before = ssh("storage", f"ls {RUNS}").stdout.split()
    workload.run("preview", "--stack", "lab", "--expect-no-changes", timeout=600)
    workload.run("up", "--yes", "--stack", "lab", "--expect-no-changes", timeout=900)
    assert ssh("storage", f"ls {RUNS}").stdout.split() == before


def test_a_task_killed_outright_leaves_no_runtime_and_no_process_on_any_node(workload):
    """node1's task shell killed with SIGKILL (its trap never runs): srun ends the other ranks
    (their traps clean up) and Slurm's Epilog (the layer's epilog.sh) removes what node1's left."""
    run = workload.outputs()["workload"]["jobs"]["p0"]["id"]
    # a long render (1280x720, 2400 frames a rank) through the node's task.sh, as the layer's jobs run
    job = render_job(run, "killed", "1280 720 24 2400", "-N3 --ntasks-per-node=1")
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # every rank staged its runtime and runs its ffmpeg
            left = leftovers()
            if len(left) == 3 and all("pid " in v for v in left.values()):
                break
            time.sleep(1)
        else:
            pytest.fail(f"job {job} never ran a runtime on all three nodes: {leftovers()}")
        ssh("node1", "pkill -KILL -f 'gpu-fleet/workload/task[.]sh'")  # not the ffmpeg it started
        deadline = time.monotonic() + 120
        while leftovers() and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        ssh("ctl", f"scancel {job}", check=False)
    why = {n: ssh(n, "grep -i epilog /var/log/slurm/slurmd.log | tail -5", check=False).stdout for n in NODES}
    assert leftovers() == {}, why
    # the Epilog logs only what it found: node1's directory, which no trap removed
    log = ssh("node1", "cat /var/log/gpu-fleet/workload-epilog.log", check=False).stdout
    assert f"job {job}: removed {NODE_BASE}/{job}." in log, (log, why)
    states = ssh("ctl", "sinfo -h -N -o '%N %t'").stdout
    assert "drain" not in states, states  # an Epilog that failed would drain its node


def test_a_gate_that_fails_publishes_nothing_and_names_the_gate(workload):
    before = tree(RELEASES)
    set_workload(workload, thresholds={"lufs_max": -40, "lufs_min": -60})
    p = workload.up(check=False, timeout=1500)  # the gate fails in the apply: no preview needed
    text = p.stdout + p.stderr
    assert p.returncode != 0
    assert "the pipeline stopped at its qa job" in text and "nothing was published" in text, text[-3000:]
    assert "gate loudness failed" in text, text[-3000:]
    assert tree(RELEASES) == before
    row = report_row(workload)
    assert row["status"] == "failed" and "gates failed: loudness" in row["evidence"], row
    set_workload(workload, thresholds={})


def test_a_runtime_changed_after_p0_is_refused_on_every_node(workload):
    """The archive a job unpacks is checked against the hash P0 recorded (the batch scripts
    carry it): a copy changed by one byte is refused on all three nodes before anything runs."""
    run = workload.outputs()["workload"]["jobs"]["p0"]["id"]
    path, sha = stack_runtime()
    server = path.replace("/mnt/data/", "/srv/ai/data/", 1)
    changed = server.replace("runtime-", "changed-", 1)
    ssh("storage", f"cp {server} {changed} && printf '\\0' >> {changed}")
    before = tree(RELEASES)
    log = f"/mnt/data/outputs/gpu-fleet-workload/runs/{run}/changed.out"
    try:
        job = render_job(run, "changed", "320 180 24 24", "-N3 --ntasks-per-node=1",
                         archive=changed.replace("/srv/ai/data/", "/mnt/data/", 1), out=log)
        wait_gone(job)
    finally:
        ssh("storage", f"rm -f {changed}")
    text = ssh("storage", f"cat {log.replace('/mnt/data/', '/srv/ai/data/', 1)}").stdout
    assert text.count(f"not {sha}: it changed after P0 staged it") == 3, text
    assert "request_geometry" not in text, text  # no rank rendered anything
    assert leftovers() == {} and tree(RELEASES) == before


def with_fault(proj: PulumiProject, fault: str, **geometry) -> subprocess.CompletedProcess:
    """`up` with a render command of workload_faults/ (copied into the project); must fail."""
    (proj.dir / "faults").mkdir(exist_ok=True)
    shutil.copy(FAULTS / fault, proj.dir / "faults" / fault)
    set_workload(proj, render={"nodes": 3, "mem_mib": 400, "script": f"faults/{fault}"},
                 geometry={"duration_s": 30, **geometry})
    p = proj.up(check=False, timeout=1500)  # the fault shows in the apply: no preview needed
    assert p.returncode != 0, p.stdout[-3000:]
    return p


#: fault -> the job it stops at, what the message names, the film's length where not 30 s
REPLAYS = {
    "path.sh": ("render", ["ffmpeg: not found", "is not there (exit 127)", "never on the batch PATH"], {}),
    "pipefail.sh": ("render", ["died of SIGPIPE (exit 141)", "grep -q` does under pipefail"], {}),
    "receipt.sh": ("assemble", ["segment 0 has no receipt in /mnt/data/outputs/gpu-fleet-workload/runs/"], {}),
    # the renderer's default canvas is 1216x768: three seconds of it, not thirty
    "geometry.sh": ("qa", ["gate request_geometry failed", "segment 1 received 1216x768 fps=24 frames=24 of 3, "
                           "the stack declared 320x180", "gate geometry failed"], {"duration_s": 3}),
    "short.sh": ("qa", ["gate frames failed: 717", "gate audio_end failed"], {}),
    "clone.sh": ("qa", ["gate motion failed", "frame 239 barely moves", "frame 479 barely moves"], {}),
}


@pytest.mark.parametrize("fault", list(REPLAYS))
def test_the_seeds_failures_stop_the_pipeline_and_publish_nothing(workload, fault):
    step, names, geometry = REPLAYS[fault]
    before, runs = tree(RELEASES), set(ssh("storage", f"ls {RUNS}").stdout.split())
    try:
        p = with_fault(workload, fault, **geometry)
    finally:  # the stand-in again, for what follows
        set_workload(workload, render={"nodes": 3, "mem_mib": 400}, geometry={})
    text = p.stdout + p.stderr
    assert f"the pipeline stopped at its {step} job" in text and "nothing was published" in text, text[-3000:]
    for name in names:
        assert name in text, (name, text[-3000:])
    assert tree(RELEASES) == before
    if step == "qa":  # the film the gates refused stays for inspection, beside its verification
        [run] = [r for r in set(ssh("storage", f"ls {RUNS}").stdout.split()) - runs if r.isdigit()]
        assert {"./final.mp4", "./verification.json"} <= set(tree(f"{RUNS}/{run}/attempt")), run
    if fault == "clone.sh":
        assert "gate frames failed" not in text  # 720 frames: only the motion gate sees the clones
    assert leftovers() == {}


def test_destroy_renames_the_release_and_nothing_else_changes(workload):
    out = workload.outputs()["workload"]
    job, run = out["release"]["job"], out["jobs"]["p0"]["id"]
    release, media = tree(f"{RELEASES}/{job}"), tree(f"{RUNS}/{run}/media")
    assert release and media
    workload.run("destroy", "--yes", "--stack", "lab", timeout=900)
    assert ssh("storage", f"test -e {RELEASES}/{job}", check=False).returncode != 0
    assert tree(f"{RELEASES}/.rolled-back/{job}") == release
    assert tree(f"{RUNS}/{run}/media") == media
