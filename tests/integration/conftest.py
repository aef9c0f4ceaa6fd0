from __future__ import annotations

import shutil

import pytest

from tests.pulumi_cli import ROOT, PulumiProject


@pytest.fixture(scope="session", autouse=True)
def _cli_installed():
    if not (ROOT / ".tools" / "bin" / "pulumi").exists() or shutil.which("go") is None:
        pytest.fail("the Pulumi CLI is not installed: run `make setup` first")


@pytest.fixture
def project(tmp_path) -> PulumiProject:
    return PulumiProject.copy_of_repo(tmp_path)


@pytest.fixture(autouse=True)
def _kept_here(monkeypatch, tmp_path):
    """The fake hosts are this machine: what primitives keep on a host (providers/kept.py) goes
    under the test's tmp, not /var/lib (the CLI's provider inherits the environment)."""
    monkeypatch.setenv("GPU_FLEET_KEPT_DIR", str(tmp_path / "kept"))
