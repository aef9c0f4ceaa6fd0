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
