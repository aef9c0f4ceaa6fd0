"""tools/pulumi-language-python-adapter keeps the host's answer to GetRequiredPlugins.

The v3.68 host answers it with `python -m pip list -v` in the program's virtualenv on every
preview, up, refresh and destroy. The adapter keeps that answer under a key made of what pip
would read (the virtualenv's contents, PYTHONPATH; its Go tests: plugincache_test.go, run here),
so the real CLI runs `pip list` once per state of the virtualenv, not once per command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from components.transport import lifeline
from tests.pulumi_cli import ROOT, PulumiProject

ADAPTER = ROOT / "tools" / "pulumi-language-python-adapter"


def test_the_adapters_go_tests_pass():
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        pytest.fail("no Go toolchain: make setup builds the adapter with it")
    p = subprocess.run([go, "test", "-count=1", "./..."], cwd=ADAPTER, capture_output=True, text=True,
                       timeout=600, env={**os.environ, "GOFLAGS": "-mod=readonly"})
    assert p.returncode == 0, p.stdout + p.stderr


def descendants(root: int) -> dict[int, str]:
    """pid -> command line of every process under root."""
    out = {}
    for pid, _ in lifeline._descendants(root):
        try:
            out[pid] = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
        except OSError:
            pass
    return out


def preview_watching_pip(proj: PulumiProject) -> tuple[subprocess.CompletedProcess, int]:
    """`pulumi preview` of the canary stack, and how many `pip list` ran under it (polled every
    10 ms; the host's takes 0.3 s or more here)."""
    p = subprocess.Popen(["pulumi", "preview", "--stack", "canary", "--non-interactive"], cwd=proj.dir,
                         env={**proj.env, "PULUMI_SKIP_CHECKPOINTS": "true"},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pips: set[int] = set()
    deadline = time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline:
        pips |= {pid for pid, cmd in descendants(p.pid).items() if " -m pip list" in cmd}
        time.sleep(0.01)
    out, _ = p.communicate(timeout=30)
    return subprocess.CompletedProcess(p.args, p.returncode, out, ""), len(pips)


def test_pip_list_runs_once_per_virtualenv_state_whatever_the_project(tmp_path):
    # a PYTHONPATH of this test's own (an empty directory) makes a state no run has seen yet
    (tmp_path / "path-a").mkdir()
    (tmp_path / "path-b").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first_project = PulumiProject.copy_of_repo(tmp_path / "a")
    first_project.env["PYTHONPATH"] = str(tmp_path / "path-a")
    first_project.init_stack("canary")
    first, pips = preview_watching_pip(first_project)
    assert first.returncode == 0, first.stdout[-3000:]
    assert pips == 1, f"the first preview ran pip list {pips} times"
    second, pips = preview_watching_pip(first_project)
    assert second.returncode == 0, second.stdout[-3000:]
    assert pips == 0, "the second preview asked pip again although nothing was installed"
    # the same plan either way (the engine's order varies)
    plan = sorted(line for line in first.stdout.splitlines() if line.lstrip().startswith("+ "))
    assert plan and plan == sorted(line for line in second.stdout.splitlines() if line.lstrip().startswith("+ "))
    # another project on the same virtualenv shares the answer
    other = PulumiProject.copy_of_repo(tmp_path / "b")
    other.env["PYTHONPATH"] = str(tmp_path / "path-a")
    other.init_stack("canary")
    third, pips = preview_watching_pip(other)
    assert third.returncode == 0, third.stdout[-3000:]
    assert pips == 0, "another project on the same virtualenv asked pip again"
    # what moves the interpreter's path is part of the key: pip is asked again
    other.env["PYTHONPATH"] = str(tmp_path / "path-b")
    fourth, pips = preview_watching_pip(other)
    assert fourth.returncode == 0, fourth.stdout[-3000:]
    assert pips == 1, f"a preview with another PYTHONPATH ran pip list {pips} times"
