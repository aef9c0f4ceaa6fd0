"""The real engine runs a Python policy pack: `pulumi preview --policy-pack DIR`.

The pinned CLI starts Python policy packs through the language host's RunPlugin RPC, which
the v3.68 host lacks; tools/pulumi-language-python-adapter provides it. The fixture pack
(tests/integration/fixtures/policy_smoke) has one mandatory policy that flags the Fleet.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.pulumi_cli import ROOT

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "policy_smoke"
MESSAGE = "smoke policy saw the fleet"


@pytest.fixture
def pack(tmp_path) -> Path:
    """A copy of the fixture pack whose `.venv` is the repository's virtualenv."""
    dest = tmp_path / "policy_smoke"
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__", ".venv"))
    (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


def test_mandatory_policy_fails_preview(project, pack):
    project.init_stack("canary")
    p = project.run("preview", "--stack", "canary", "--policy-pack", str(pack), check=False)
    text = p.stdout + p.stderr
    assert p.returncode != 0, text
    assert MESSAGE in text, text
    assert "mandatory" in text, text
    assert "smoke-sees-fleet" in text, text


def test_advisory_policy_passes_preview(project, pack, tmp_path):
    # Same pack, its policy turned advisory by policy-pack config: it still runs and reports.
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"smoke-sees-fleet": "advisory"}))
    project.init_stack("canary")
    p = project.run(
        "preview", "--stack", "canary", "--policy-pack", str(pack),
        "--policy-pack-config", str(config), check=False,
    )
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    assert MESSAGE in text, text
    assert "advisory" in text, text
