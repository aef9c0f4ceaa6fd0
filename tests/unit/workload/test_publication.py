"""Publication and rollback (issue 37, item 5) as processes on real directories: a release appears
by one rename with final.done and release.sha256, only when every gate passed; a rollback only
renames it to the fixed archive name, after asserting the job's state, the path, an exact file
allowlist and the hashes, and proves afterwards that the source segments, the previous release
and a rejected attempt are unchanged."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from components.layers.workload.runtime import ONHOST

FILES = ["final.done", "final.mp4", "release.sha256", "verification.json"]


def sh(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(ONHOST / script), *args], capture_output=True, text=True, timeout=60)


def attempt(base: Path, name: str, passed: bool = True) -> Path:
    d = base / "attempts" / name
    d.mkdir(parents=True)
    (d / "final.mp4").write_bytes(f"film {name}".encode() * 100)
    (d / "verification.json").write_text(json.dumps({"passed": passed, "gates": [{"name": "frames",
                                                                                    "passed": True}]}))
    return d


def tree(*paths: Path) -> dict[str, bytes]:
    return {str(f): f.read_bytes() for p in paths for f in sorted(p.rglob("*")) if f.is_file()}


@pytest.fixture
def store(tmp_path):
    """A store with source segments, an earlier release and a rejected attempt."""
    (tmp_path / "segments").mkdir()
    for k in range(3):
        (tmp_path / "segments" / f"seg-{k}.mov").write_bytes(bytes([k]) * 1000)
    assert sh("publish.sh", str(attempt(tmp_path, "100")), str(tmp_path / "releases"), "100").returncode == 0
    attempt(tmp_path, "rejected", passed=False)
    return tmp_path


def test_a_passing_attempt_is_published_by_one_rename(store):
    a = attempt(store, "101")
    p = sh("publish.sh", str(a), str(store / "releases"), "101")
    dest = store / "releases" / "101"
    assert p.returncode == 0 and p.stdout.startswith(f"published {dest} "), p.stderr
    assert not a.exists() and sorted(x.name for x in dest.iterdir()) == FILES
    assert subprocess.run(["sha256sum", "-c", "release.sha256"], cwd=dest, capture_output=True).returncode == 0
    assert json.loads((dest / "final.done").read_text())["job"] == "101"
    # a release is never overwritten
    p = sh("publish.sh", str(attempt(store, "101-again")), str(store / "releases"), "101")
    assert p.returncode == 5 and "already exists" in p.stderr


def test_a_failed_gate_publishes_nothing_and_keeps_the_attempt(store):
    rejected = store / "attempts" / "rejected"
    p = sh("publish.sh", str(rejected), str(store / "releases"), "102")
    assert p.returncode == 5 and "does not say every gate passed: nothing published" in p.stderr
    assert not (store / "releases" / "102").exists() and (rejected / "final.mp4").exists()


def test_rollback_renames_only_the_release_and_proves_the_rest_unchanged(store):
    sh("publish.sh", str(attempt(store, "101")), str(store / "releases"), "101")
    watched = [store / "segments", store / "releases" / "100", store / "attempts" / "rejected"]
    before = tree(*watched)
    p = sh("rollback.sh", str(store / "releases"), "101", "COMPLETED", "0:0", *map(str, watched))
    assert p.returncode == 0 and "3 watched paths unchanged" in p.stdout, p.stderr
    assert not (store / "releases" / "101").exists()
    assert sorted(x.name for x in (store / "releases" / ".rolled-back" / "101").iterdir()) == FILES
    assert tree(*watched) == before


@pytest.mark.parametrize("spoil, state, words", [
    (None, ("FAILED", "1:0"), "its Slurm state is FAILED 1:0, not COMPLETED 0:0"),
    (lambda d: (d / "extra.txt").write_text("x"), ("COMPLETED", "0:0"), "not exactly final.done final.mp4"),
    (lambda d: (d / "final.mp4").write_bytes(b"other"), ("COMPLETED", "0:0"), "does not match its release.sha256"),
    (lambda d: (d / "final.mp4").unlink() or (d / "final.mp4").symlink_to(d / "verification.json"),
     ("COMPLETED", "0:0"), "not exactly final.done final.mp4"),
])
def test_rollback_refuses_what_it_cannot_prove_and_moves_nothing(store, spoil, state, words):
    sh("publish.sh", str(attempt(store, "101")), str(store / "releases"), "101")
    release = store / "releases" / "101"
    if spoil:
        spoil(release)
    p = sh("rollback.sh", str(store / "releases"), "101", *state, str(store / "segments"))
    assert p.returncode == 6 and words in p.stderr, p.stderr
    assert release.is_dir() and not (store / "releases" / ".rolled-back").exists()


def test_a_symlinked_release_is_refused(store):
    (store / "releases" / "103").symlink_to(store / "releases" / "100")
    p = sh("rollback.sh", str(store / "releases"), "103", "COMPLETED", "0:0")
    assert p.returncode == 6 and "is not a directory (or is a symlink)" in p.stderr
