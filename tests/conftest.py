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


@pytest.fixture
def full_config() -> dict:
    return copy.deepcopy(stack_config("full"))


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
