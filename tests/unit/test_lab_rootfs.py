"""Where the lab's hosts keep their writable layers (lab/rootfs.py): the choice, without a lab."""

from __future__ import annotations

import pytest

from lab import rootfs
from lab.common import LabError


@pytest.mark.parametrize(("env", "memory_gib", "expected"), [
    (None, 24, True), (None, 15, False), ("auto", 16, True),
    ("1", 2, True), ("0", 64, False),
])
def test_tmpfs_by_memory_unless_told(monkeypatch, env, memory_gib, expected):
    if env is None:
        monkeypatch.delenv("GPU_FLEET_LAB_TMPFS", raising=False)
    else:
        monkeypatch.setenv("GPU_FLEET_LAB_TMPFS", env)
    monkeypatch.setattr(rootfs, "memory_kb", lambda: memory_gib * 2**20)
    assert rootfs.writable_on_tmpfs() is expected


def test_a_wrong_setting_is_named(monkeypatch):
    monkeypatch.setenv("GPU_FLEET_LAB_TMPFS", "yes")
    with pytest.raises(LabError, match="GPU_FLEET_LAB_TMPFS must be auto, 0 or 1 \\(got 'yes'\\)"):
        rootfs.writable_on_tmpfs()


def test_memory_is_the_machines_memtotal():
    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    assert rootfs.memory_kb() == total


def test_a_wrong_setting_is_refused_before_any_host_is_touched(monkeypatch, tmp_path):
    """Not taken for a failed overlay mount (which falls back to a copy of the image)."""
    monkeypatch.setenv("GPU_FLEET_LAB_TMPFS", "on")
    monkeypatch.setattr(rootfs, "HOSTS_DIR", tmp_path)
    touched = []
    monkeypatch.setattr(rootfs, "run", lambda argv, **kw: touched.append(argv))
    from lab.hosts import Host
    with pytest.raises(LabError, match="GPU_FLEET_LAB_TMPFS"):
        rootfs.prepare(Host("node1", "10.0.0.1", ("node",)), tmp_path / "base", "auto")
    assert touched == [] and not (tmp_path / "node1").exists()
