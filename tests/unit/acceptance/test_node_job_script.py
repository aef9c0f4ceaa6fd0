"""node_job.sh, run as sbatch runs it on the node, against stub `srun` and `squeue` that record
their calls: a step is asked for only once the controller holds none of the job's earlier ones."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from components.layers.acceptance import provider

STEP_LINE = {"inventory": "node=node1", "gpu": "step=$$ cvd=0 held=2 devices=0:open,1:EPERM",
             "oom": "step=9", "fs": "jobroot=ok", "residue": "residue=none"}


def stub(bin_dir: Path, name: str, body: str) -> None:
    p = bin_dir / name
    p.write_text(f'#!/bin/sh\necho "{name} $*" >> "$STUB_LOG"\n{body}\n')
    p.chmod(0o755)


def run_job(tmp_path: Path, held_for: int, settle_s: str = "30", released: str = "48.batch") -> tuple[subprocess.CompletedProcess, list[str]]:
    """node_job.sh for a 2-GPU node whose controller lists an earlier step (job 48's step 0)
    for the first `held_for` squeue calls after each srun, then only `released`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    # squeue: the step srun ran last stays listed for `held_for` calls
    stub(bin_dir, "squeue", f'n=$(cat "$STUB_DIR/held" 2>/dev/null || echo 0); echo $((n + 1)) > "$STUB_DIR/held"\n'
                            f'printf "%s\\n" "{released}" | grep .; [ "$n" -lt {held_for} ] && echo 48.0; exit 0')
    # srun: its step's kind is the argument after "step"; prints that kind's line
    cases = "\n".join(f'  {k}) echo "{v}" ;;' for k, v in STEP_LINE.items())
    stub(bin_dir, "srun", 'rm -f "$STUB_DIR/held"\nwhile [ "$1" != step ]; do shift; done\n'
                          f'case "$2" in\n{cases}\nesac')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_LOG": str(log), "STUB_DIR": str(tmp_path),
           "SLURM_JOB_ID": "48", "GF_STEP": "unused", "GF_COUNT": "2", "GF_PREFIX": "/dev/nvidia", "GF_PYNVML": "",
           "GF_ROOT": str(tmp_path), "GF_RO": "", "GF_MARKER": "", "GF_DEEP": "", "GF_SETTLE": settle_s}
    p = subprocess.run(["sh", "-c", provider._NODE_JOB], env=env, capture_output=True, text=True, timeout=60)
    return p, log.read_text().splitlines()


def kinds(calls: list[str]) -> list[str]:
    """The calls in order: 'squeue', or 'srun <kind>'."""
    out = []
    for c in calls:
        words = c.split()
        out.append(f"srun {words[words.index('step') + 1]}" if words[0] == "srun" else words[0])
    return out


def test_the_single_gpu_steps_wait_until_the_inventory_step_is_released(tmp_path):
    p, calls = run_job(tmp_path, held_for=3)
    assert p.returncode == 0, p.stderr
    seq = kinds(calls)
    first_gpu = seq.index("srun gpu")
    between = seq[seq.index("srun inventory") + 1:first_gpu]
    # three polls still list step 0, the fourth does not: only then the GPU steps are asked for
    assert between == ["squeue"] * 4, seq
    assert seq.count("srun gpu") == 2
    # and the over-memory step waits for the single-GPU steps in turn
    assert seq[seq.index("srun oom") - 1] == "squeue"
    assert "done=1" in p.stdout.splitlines() and "settle.held" not in p.stdout


def test_a_step_that_is_never_released_stops_the_wait_and_is_printed(tmp_path):
    p, calls = run_job(tmp_path, held_for=10**6, settle_s="1")
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert "settle.held=48.batch 48.0" in out, out
    # the job goes on (its checks judge what the steps then saw) and ends
    assert kinds(calls).count("srun gpu") == 2 and out[-1] == "done=1"


@pytest.mark.parametrize("listed", ["48.batch", "48.batch\n48.extern", ""])
def test_batch_and_extern_steps_and_an_empty_list_are_not_waited_for(tmp_path, listed):
    p, calls = run_job(tmp_path, held_for=0, released=listed)
    assert p.returncode == 0 and "settle.held" not in p.stdout, p.stdout
    assert kinds(calls)[:3] == ["srun inventory", "squeue", "srun gpu"]
