"""Shared fixtures: stack configs as the engine would hand them to the program."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def stack_config(stack: str) -> dict:
    """The `config:` mapping of a committed stack file."""
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


def fleet14() -> dict:
    """The full stack after its K3s retirement, as a plain Slurm fleet: the 12 K3s nodes owned by
    slurm, the layer's section gone. A valid 14-node fleet, for what the full fleet renders and
    declares without the retirement's resources."""
    raw = stack_config("full")
    # the committed stack's secrets are encrypted under that stack's salt: a stack written from
    # this config generates its own (PulumiProject.init_stack -> ensure_secrets)
    raw = {k: v for k, v in raw.items() if not (isinstance(v, dict) and "secure" in v)}
    del raw["gpu-fleet:k3s_retirement"]
    for n in raw["gpu-fleet:nodes"]:
        if n["owner"] == "k3s":
            n["owner"] = "slurm"
    return raw


@pytest.fixture
def full_config() -> dict:
    """The committed full stack as it is: the seed's target, 12 K3s nodes retired into Slurm."""
    return copy.deepcopy(stack_config("full"))


@pytest.fixture
def fleet14_config() -> dict:
    return fleet14()


@pytest.fixture
def canary_config() -> dict:
    return copy.deepcopy(stack_config("canary"))


@pytest.fixture
def accounting_cfg():
    """The canary stack, parsed, with the accounting layer on."""
    from components.config import parse_fleet_config

    raw = stack_config("canary")
    raw["gpu-fleet:accounting"] = {"enabled": True}
    return parse_fleet_config(raw, "canary")


@pytest.fixture(autouse=True, scope="session")
def _rendered_store(tmp_path_factory):
    """File(by_hash=True)'s local store (components/providers/stored.py): the tests' own, not the
    user's cache; the CLI tests' programs inherit it through the environment."""
    import os

    if "GPU_FLEET_STORE_DIR" not in os.environ:
        os.environ["GPU_FLEET_STORE_DIR"] = str(tmp_path_factory.mktemp("rendered-store"))
    yield
