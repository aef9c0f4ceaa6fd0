"""The guards policy, called directly: the layer's rendered unit passes (with and without the
memory guard), each widened privilege fails with a sentence naming the unit and the fix, an
unknown content is skipped, and other units are not its business."""

from __future__ import annotations

import pytest

from components.config.load import parse_fleet_config
from components.layers.guards import render
from tests.conftest import stack_config

from gpu_fleet_policies import guards, relax
from gpu_fleet_policies.pack import DESCRIPTIONS, VALIDATORS, declared_levels

from .fakes import SYSTEMD_UNIT, UNKNOWN_STR, resource_args, violations

CONN = {"name": "gpu01", "address": "192.0.2.21"}


@pytest.fixture(autouse=True)
def _relax():
    relax.reset()


def rendered(memory: bool) -> str:
    raw = stack_config("canary")
    raw["gpu-fleet:guards"] = {"enabled": True, **({"memory": {}} if memory else {})}
    cfg = parse_fleet_config(raw, "canary")
    return render.render_unit(cfg.guards, cfg.gpu_runtime.pynvml_dir)


def unit(content, name=render.UNIT, dropins=None):
    return resource_args(SYSTEMD_UNIT, {"conn": CONN, "name": name, "content": content, "dropins": dropins or {},
                                        "enabled": True, "active": True, "properties": {}, "triggers": {}},
                         "gpu01-guard-unit")


def test_registered_mandatory_and_mirrors_the_layer():
    assert VALIDATORS["guards-least-privilege"] is guards.validate_least_privilege
    assert DESCRIPTIONS["guards-least-privilege"] and declared_levels()["guards-least-privilege"] == "mandatory"
    assert guards.UNIT == render.UNIT


@pytest.mark.parametrize("memory", [False, True])
def test_the_rendered_unit_passes(memory):
    assert violations(guards.validate_least_privilege, unit(rendered(memory))) == []


@pytest.mark.parametrize("change, words", [
    (("CapabilityBoundingSet=\n", ""), "declares no CapabilityBoundingSet"),
    (("CapabilityBoundingSet=\n", "CapabilityBoundingSet=CAP_KILL CAP_SYS_ADMIN\n"), "keeps CAP_SYS_ADMIN"),
    (("CapabilityBoundingSet=\n", "CapabilityBoundingSet=~CAP_SYS_ADMIN\n"), "by exclusion"),
    (("CapabilityBoundingSet=\n", "CapabilityBoundingSet=\nAmbientCapabilities=CAP_NET_ADMIN\n"),
     "grants ambient CAP_NET_ADMIN"),
    (("NoNewPrivileges=yes\n", "NoNewPrivileges=no\n"), "NoNewPrivileges=yes"),
    (("ProtectSystem=strict\n", "ProtectSystem=full\n"), "ProtectSystem=strict"),
])
def test_a_widened_unit_fails_naming_it_and_the_fix(change, words):
    text = rendered(False)
    assert change[0] in text
    msgs = violations(guards.validate_least_privilege, unit(text.replace(change[0], change[1])))
    assert len(msgs) == 1 and words in msgs[0], msgs
    assert "gpu-fleet-guard.service" in msgs[0] and "render.py" in msgs[0]


def test_a_drop_in_that_widens_the_unit_fails_too():
    msgs = violations(guards.validate_least_privilege, unit(rendered(False), dropins={
        "50-debug.conf": "[Service]\nCapabilityBoundingSet=CAP_SYS_ADMIN\n"}))
    assert len(msgs) == 1 and "keeps CAP_SYS_ADMIN" in msgs[0], msgs


def test_unknown_content_is_skipped_and_other_units_are_not_its_business():
    assert violations(guards.validate_least_privilege, unit(UNKNOWN_STR)) == []
    assert violations(guards.validate_least_privilege, unit("[Service]\nExecStart=/bin/true\n", name="x.service")) == []
