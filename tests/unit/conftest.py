"""Unit-test fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_probe_memory(tmp_path, monkeypatch):
    """Each unit test's hosts start with no remembered refresh probes (transport/refresh.py):
    a refresh read is a plain probe unless a test gives it a memory."""
    monkeypatch.setenv("GPU_FLEET_PROBE_DIR", str(tmp_path / "probe-memory"))
