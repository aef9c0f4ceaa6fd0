"""The workload's on-node steps as processes, without Slurm (the lab runs them as Slurm jobs):
the runtime packed (deterministic), staged by hash, three render ranks (the STAND-IN for the video
model; SLURM_PROCID and SLURM_NTASKS set as srun sets them), the assembly and the gates. A PATH
without any ffmpeg proves the steps use the runtime's pinned one alone (the seed's R0), and the
seed's failures stop the pipeline with a sentence naming the cause: a runtime changed after P0,
a geometry that never reached the renderer (G1-G3), 717 frames (R4), a receipt in another
directory than its film (R3).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import imageio_ffmpeg
import pytest

from components.layers.workload import runtime
from components.layers.workload.onhost import gates as g

ONHOST = runtime.ONHOST
FFMPEG = Path(imageio_ffmpeg.get_ffmpeg_exe())
THRESHOLDS = {"join_ssim": 0.97, "endpoint_ssim": 0.99, "motion_low": 0.3, "motion_high": 1.7, "motion_min": 0.5,
              "black_s": 0.5, "silence_db": -50, "silence_s": 0.1, "lufs_min": -30, "lufs_max": -14,
              "true_peak_max": -1.0}
#: what the steps may find on PATH: a batch environment's basics, and no ffmpeg
BASICS = ("sh", "awk", "sha256sum", "mv", "cp", "rm", "mkdir", "zstd", "tar", "grep", "cat", "printf", "readlink",
          "date")


#: two of the lab's FAULTS (tests/lab/workload_faults/), packed as extra steps: a render command
#: that runs ffmpeg from the batch PATH, and one that checks a filter with grep -q under pipefail
FAULTS = Path(__file__).resolve().parents[2] / "lab" / "workload_faults"


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    d = tmp_path_factory.mktemp("runtime")
    digest = runtime.pack(d / "runtime.tar.zst", FFMPEG, THRESHOLDS,
                          {"path.sh": FAULTS / "path.sh", "pipefail.sh": FAULTS / "pipefail.sh"})
    return d / "runtime.tar.zst", digest


@pytest.fixture
def batch_path(tmp_path):
    """A PATH like a compute node's batch environment: the basics, no ffmpeg anywhere."""
    d = tmp_path / "batch-bin"
    d.mkdir()
    for tool in BASICS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed on this machine"
        (d / tool).symlink_to(found)
    return str(d)


def step(script: str, *args: str, env: dict[str, str], path: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(ONHOST / script), *args], env={"PATH": path, **env}, capture_output=True,
                          text=True, timeout=300)


def test_the_runtime_is_deterministic_and_says_what_it_pins(packed, tmp_path):
    archive, digest = packed
    assert runtime.pack(tmp_path / "again.tar.zst", FFMPEG, THRESHOLDS,
                        {"path.sh": FAULTS / "path.sh", "pipefail.sh": FAULTS / "pipefail.sh"}) == digest
    p = subprocess.run(["sh", "-c", f"zstd -dc {archive} | tar -t"], capture_output=True, text=True, check=True)
    names = set(p.stdout.split())
    assert {"bin/ffmpeg", "lib/gates.py", "lib/stage.sh", "lib/preflight.sh", "lib/render.sh", "lib/assemble.sh",
            "thresholds.json", "manifest.json", "SHA256SUMS"} <= names
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["sh", "-c", f"zstd -dc {archive} | tar -x -C {out} manifest.json"], check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tools"]["ffmpeg"]["version"].startswith("ffmpeg version 7.0.2-static")
    assert manifest["tools"]["ffmpeg"]["sha256"] == runtime.sha256_bytes(FFMPEG.read_bytes())


def test_the_stand_in_stays_in_the_runtime_beside_a_stacks_own_render_command(tmp_path):
    own = tmp_path / "render.sh"
    own.write_text("#!/bin/sh\nexec sh \"$RT/lib/standin-render.sh\" \"$@\"\n")
    plain, wrapped = runtime.contents(FFMPEG, THRESHOLDS, {}), runtime.contents(FFMPEG, THRESHOLDS, {"render.sh": own})
    standin = (ONHOST / "render.sh").read_bytes()
    assert plain["lib/render.sh"][0] == plain[f"lib/{runtime.STANDIN}"][0] == standin
    assert wrapped["lib/render.sh"][0] == own.read_bytes() and wrapped[f"lib/{runtime.STANDIN}"][0] == standin


def test_stage_render_assemble_and_gate_on_three_ranks_with_no_ffmpeg_on_path(packed, tmp_path, batch_path):
    archive, digest = packed
    media, attempt = tmp_path / "media", tmp_path / "attempt"
    media.mkdir()
    staged = step("stage.sh", str(archive), digest, str(tmp_path / "job"), env={}, path=batch_path)
    assert staged.returncode == 0 and staged.stdout.startswith(f"runtime ok {digest}"), staged.stderr
    rt = str(tmp_path / "job" / "runtime")

    def rank(k: int) -> subprocess.CompletedProcess:
        return step("render.sh", "320", "180", "24", "240", path=batch_path,
                    env={"RT": rt, "MEDIA_DIR": str(media), "SLURM_PROCID": str(k), "SLURM_NTASKS": "3"})
    with ThreadPoolExecutor(3) as pool:
        ranks = list(pool.map(rank, range(3)))
    for k, r in enumerate(ranks):
        assert r.returncode == 0, r.stderr
        assert f"request_geometry 320x180 fps=24 frames=240 segment={k}/3 first_frame={240 * k}" in r.stdout
    made = step("assemble.sh", "3", "960000", path=batch_path,
                env={"RT": rt, "MEDIA_DIR": str(media), "ATTEMPT_DIR": str(attempt)})
    assert made.returncode == 0, made.stderr
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"ffmpeg": f"{rt}/bin/ffmpeg", "frames": 720, "width": 320, "height": 180, "fps": 24,
                                "duration_s": 30, "audio_rate": 32000, "joins": [240, 480], "anchors": [],
                                "thresholds": THRESHOLDS}))
    judged = subprocess.run([sys.executable, f"{rt}/lib/gates.py", str(spec), str(attempt / "final.mp4"),
                             str(attempt / "verification.json")], capture_output=True, text=True, timeout=300,
                            env={"PATH": batch_path})
    assert judged.returncode == 0, judged.stdout + judged.stderr
    result = json.loads((attempt / "verification.json").read_text())
    figures = {x["name"]: x["figure"] for x in result["gates"]}
    assert result["passed"] and figures["frames"] == 720 and figures["audio_end"] == {"ticks": 960000, "rate": 32000}
    # the evidence beside it: the joins' frames, four a row, one row a join
    sheet = step("contact_sheet.sh", str(attempt / "final.mp4"), str(attempt / "joins.png"), "240", "480",
                 env={"RT": rt}, path=batch_path)
    assert sheet.returncode == 0, sheet.stderr
    head = (attempt / "joins.png").read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (4 * 320, 2 * 180)


def test_a_runtime_changed_after_p0_is_refused_naming_both_hashes(packed, tmp_path, batch_path):
    archive, digest = packed
    changed = tmp_path / "runtime.tar.zst"
    shutil.copy(archive, changed)
    with changed.open("ab") as f:
        f.write(b"\0")
    p = step("stage.sh", str(changed), digest, str(tmp_path / "job"), env={}, path=batch_path)
    assert p.returncode == 4 and f"not {digest}: it changed after P0 staged it" in p.stderr, p.stderr
    assert not (tmp_path / "job" / "runtime").exists()


def test_a_geometry_that_never_reached_the_renderer_fails_the_geometry_gate(packed, tmp_path, batch_path):
    archive, digest = packed
    step("stage.sh", str(archive), digest, str(tmp_path / "job"), env={}, path=batch_path)
    rt, media = str(tmp_path / "job" / "runtime"), tmp_path / "media"
    media.mkdir()
    # the launcher dropped the geometry: the renderer falls back to its default canvas, and says so
    r = step("render.sh", "", "", "24", "24", path=batch_path,
             env={"RT": rt, "MEDIA_DIR": str(media), "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert r.returncode == 0 and "request_geometry 1216x768 " in r.stdout, r.stderr
    gates = g.check({"ffmpeg": f"{rt}/bin/ffmpeg", "frames": 24, "width": 320, "height": 180, "fps": 24,
                     "duration_s": 1, "audio_rate": 32000, "thresholds": THRESHOLDS}, str(media / "seg-0.mov"))
    geo = next(x for x in gates if x["name"] == "geometry")
    assert not geo["passed"] and geo["figure"] == {"width": 1216, "height": 768, "fps": 24.0}


def test_717_frames_and_a_receipt_elsewhere_stop_the_pipeline(packed, tmp_path, batch_path):
    archive, digest = packed
    step("stage.sh", str(archive), digest, str(tmp_path / "job"), env={}, path=batch_path)
    rt, media, elsewhere = str(tmp_path / "job" / "runtime"), tmp_path / "media", tmp_path / "default"
    media.mkdir()
    for k in range(3):  # each segment one frame short: 239 frames, as the seed's FFmpeg 7 flushed
        r = step("render.sh", "160", "90", "24", "239", path=batch_path,
                 env={"RT": rt, "MEDIA_DIR": str(media), "SLURM_PROCID": str(k), "SLURM_NTASKS": "3"})
        assert r.returncode == 0, r.stderr
    # the assembly reading another directory than the render wrote: refused, naming it
    a = step("assemble.sh", "3", "960000", path=batch_path,
             env={"RT": rt, "MEDIA_DIR": str(elsewhere), "ATTEMPT_DIR": str(tmp_path / "attempt")})
    assert a.returncode == 3 and f"segment 0 has no receipt in {elsewhere}" in a.stderr
    a = step("assemble.sh", "3", "960000", path=batch_path,
             env={"RT": rt, "MEDIA_DIR": str(media), "ATTEMPT_DIR": str(tmp_path / "attempt")})
    assert a.returncode == 0, a.stderr
    gates = g.check({"ffmpeg": f"{rt}/bin/ffmpeg", "frames": 720, "width": 160, "height": 90, "fps": 24,
                     "duration_s": 30, "audio_rate": 32000, "thresholds": THRESHOLDS},
                    str(tmp_path / "attempt" / "final.mp4"))
    frames = next(x for x in gates if x["name"] == "frames")
    assert not frames["passed"] and frames["figure"] == 717
    assert os.path.exists(tmp_path / "attempt" / "final.mp4")  # kept for inspection, never published


# ---- cleanup that travels with the job (item 3) ------------------------------------------------------

def task(packed, base: Path, batch_path: str, *args: str, job: str = "4242") -> subprocess.Popen:
    archive, digest = packed
    return subprocess.Popen(["sh", str(ONHOST / "task.sh"), str(archive), digest, *args],
                            env={"PATH": batch_path, "SLURM_JOB_ID": job, "JOB_BASE": str(base),
                                 "MEDIA_DIR": str(base.parent / "media"), "SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(pred, what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, what
        time.sleep(0.1)


def runtime_ffmpegs(base: Path) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and os.readlink(p / "exe").startswith(str(base)):
                out.append(int(p.name))
        except OSError:
            pass
    return out


def test_a_task_stages_runs_its_step_and_leaves_no_runtime(packed, tmp_path, batch_path):
    base = tmp_path / "node-local"
    (tmp_path / "media").mkdir()
    p = task(packed, base, batch_path, "render.sh", "160", "90", "24", "24")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and "request_geometry 160x90" in out, err
    assert "runtime ok" in err and (tmp_path / "media" / "seg-0.done").exists()
    assert list(base.iterdir()) == []  # the trap removed the job's runtime


def test_a_cancelled_task_leaves_no_runtime_and_the_epilog_backs_up_a_killed_one(packed, tmp_path, batch_path):
    base = tmp_path / "node-local"
    (tmp_path / "media").mkdir()
    # scancel: SIGTERM to every process of the step (as slurmstepd signals them), the trap removes
    # the runtime
    p = task(packed, base, batch_path, "render.sh", "1216", "768", "24", "2400")
    wait_for(lambda: runtime_ffmpegs(base), "the render never started")
    os.killpg(p.pid, signal.SIGTERM)
    p.wait(timeout=30)
    wait_for(lambda: not runtime_ffmpegs(base), "the runtime's ffmpeg outlived the cancelled task", 30)
    assert p.returncode == 143 and list(base.iterdir()) == []
    # the task's shell killed with SIGKILL: no trap runs; its ffmpeg, orphaned, and the runtime stay
    # until Slurm's Epilog
    p = task(packed, base, batch_path, "render.sh", "1216", "768", "24", "2400", job="4243")
    wait_for(lambda: runtime_ffmpegs(base), "the render never started")
    p.kill()
    p.wait(timeout=30)
    left = runtime_ffmpegs(base)
    assert left and [d.name.split(".")[0] for d in base.iterdir()] == ["4243"]
    log = tmp_path / "epilog.log"
    e = subprocess.run(["sh", str(ONHOST / "epilog.sh")], env={"PATH": batch_path + ":/usr/bin:/bin",
                       "SLURM_JOB_ID": "4243", "JOB_BASE": str(base), "EPILOG_LOG": str(log)},
                       capture_output=True, text=True, timeout=30)
    assert e.returncode == 0, e.stderr
    wait_for(lambda: not runtime_ffmpegs(base), "the epilog left the job's ffmpeg running", 10)
    assert list(base.iterdir()) == [] and f"killed {left[0]}" in log.read_text()


def test_a_step_that_calls_a_tool_from_the_batch_path_or_dies_of_sigpipe_is_named(packed, tmp_path, batch_path):
    """The seed's R0 and R2 as a task's step: exit 127 and 141, each with the task's sentence."""
    base = tmp_path / "node-local"
    (tmp_path / "media").mkdir()
    p = task(packed, base, batch_path, "path.sh", "160", "90", "24", "24")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 127 and "ffmpeg: not found" in err, err
    assert "task.sh: path.sh ran a command that is not there (exit 127)" in err and batch_path in err, err
    p = task(packed, base, batch_path, "pipefail.sh", "160", "90", "24", "24")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 141 and "task.sh: pipefail.sh died of SIGPIPE (exit 141)" in err, err
    assert list(base.iterdir()) == [] and not (tmp_path / "media" / "seg-0.done").exists()


# ---- the capability check (R1, R2) ---------------------------------------------------------------

FILTERS = "geq,amix,anoisesrc,sine,concat,atrim,ssim,tblend,signalstats,metadata,blackdetect,silencedetect,ebur128"


def test_preflight_finds_every_filter_and_names_what_is_missing(packed, tmp_path, batch_path):
    archive, digest = packed
    step("stage.sh", str(archive), digest, str(tmp_path / "job"), env={}, path=batch_path)
    rt = {"RT": str(tmp_path / "job" / "runtime")}
    ok = step("preflight.sh", FILTERS, "libx264,aac,pcm_s16le", env=rt, path=batch_path)
    assert ok.returncode == 0 and ok.stdout.startswith("preflight ok ffmpeg version 7.0.2-static"), ok.stderr
    bad = step("preflight.sh", f"{FILTERS},nosuchfilter", "libx264,nosuchenc", env=rt, path=batch_path)
    assert bad.returncode == 8 and "lacks: filter nosuchfilter; encoder nosuchenc;" in bad.stderr, bad.stderr


def test_the_seeds_r2_grep_q_under_pipefail_fails_a_tool_that_has_the_filter(packed, tmp_path, batch_path):
    """What the preflight does not do: a long listing piped into `grep -q` under pipefail. grep
    exits at its first match, the producer dies of SIGPIPE, and the check fails (141) although
    ssim is there; the preflight, capturing first, passes on the same tool."""
    archive, digest = packed
    step("stage.sh", str(archive), digest, str(tmp_path / "job"), env={}, path=batch_path)
    ffmpeg = tmp_path / "job" / "runtime" / "bin" / "ffmpeg"
    naive = subprocess.run(["bash", "-c", f"set -o pipefail; {ffmpeg} -hide_banner -h full 2>/dev/null | grep -q ssim"],
                           capture_output=True, timeout=60)
    assert naive.returncode == 141
    ok = step("preflight.sh", "ssim", "aac", env={"RT": str(tmp_path / "job" / "runtime")}, path=batch_path)
    assert ok.returncode == 0, ok.stderr
