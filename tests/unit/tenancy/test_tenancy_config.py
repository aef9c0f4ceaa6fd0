"""The tenancy section's refusals: each names the stack file's field, before any host is touched."""

from __future__ import annotations

import pytest

from components.config.load import parse_fleet_config
from components.errors import ConfigError
from components.layers.tenancy.config import slurm_seconds

from .common import tenancy_raw

SRC = "stacks/Pulumi.full.yaml"


def problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(raw, SRC)
    assert all(line.startswith(f"  {SRC}: ") for line in str(exc.value).splitlines()[1:] if line.startswith("  "))
    return exc.value.problems


def test_the_example_is_valid():
    cfg = parse_fleet_config(tenancy_raw(), SRC)
    assert [t.name for t in cfg.tenancy.teams] == ["vision", "speech", "infra"]


def test_guarantees_beyond_the_fleet_are_refused_naming_each_team():
    raw = tenancy_raw()
    raw["gpu-fleet:tenancy"]["teams"][2]["guaranteed"] = {"v100": 40}
    [p] = problems(raw)
    assert p == ("gpu-fleet:tenancy.teams: the guarantees of v100 GPUs add up to 120, more than the 112 the "
                 "fleet's partitions have (vision 48, speech 32, infra 40)")


def test_a_gpu_type_no_node_has_is_refused():
    raw = tenancy_raw()
    raw["gpu-fleet:tenancy"]["teams"][2]["guaranteed"] = {"a100": 8}
    [p] = problems(raw)
    assert p.startswith("gpu-fleet:tenancy.teams[2] (infra).guaranteed.a100: no node in a partition has a100")


def test_a_member_of_two_teams_needs_a_default():
    raw = tenancy_raw()
    del raw["gpu-fleet:tenancy"]["default_team"]
    [p] = problems(raw)
    assert p == ("gpu-fleet:tenancy.default_team.carol: carol is a member of vision, speech; say which team "
                 "is the default account")
    raw["gpu-fleet:tenancy"]["default_team"] = {"carol": "infra"}
    [p] = problems(raw)
    assert p == "gpu-fleet:tenancy.default_team.carol: carol is not a member of infra"


@pytest.mark.parametrize("mode", ["SUSPEND", "suspend,gang"])
def test_suspend_is_refused_because_a_suspended_job_keeps_its_gpus(mode):
    raw = tenancy_raw()
    raw["gpu-fleet:tenancy"]["opportunistic"]["preempt_mode"] = mode
    [p] = problems(raw)
    assert p.startswith("gpu-fleet:tenancy.opportunistic.preempt_mode: ") and "GRES are not released" in p, p


def test_a_grace_longer_than_a_partitions_max_time_is_refused():
    raw = tenancy_raw()
    raw["gpu-fleet:slurm"]["partitions"][0]["max_time"] = "1:30"  # 1 min 30 s
    [p] = problems(raw)
    assert p.startswith("gpu-fleet:tenancy.opportunistic.grace_s: 120 s is longer than partition ") and \
        "MaxTime 1:30 (gpu-fleet:slurm.partitions[0].max_time)" in p, p


def test_a_switch_naming_an_unknown_node_and_a_node_under_no_switch_are_refused():
    raw = tenancy_raw()
    sw = raw["gpu-fleet:tenancy"]["switches"]
    missing = sw[1]["nodes"].pop()
    sw[1]["nodes"].append("gpu99")
    ps = problems(raw)
    assert "gpu-fleet:tenancy.switches[1] (leaf2).nodes[6]: unknown node 'gpu99' (not in any partition)" in ps
    assert any(p.startswith("gpu-fleet:tenancy.switches: every partition node sits under a leaf switch")
               and p.endswith(f"missing: {missing}") for p in ps), ps


def test_tenancy_needs_accounting():
    raw = tenancy_raw()
    raw["gpu-fleet:accounting"] = {"enabled": False}
    assert any(p.startswith("gpu-fleet:tenancy.enabled: tenancy needs the accounting layer") for p in problems(raw))


def test_the_canary_user_is_not_a_team_member():
    raw = tenancy_raw()
    raw["gpu-fleet:tenancy"]["teams"][2]["members"].append("fleetcanary")
    assert any("the canary user fleetcanary runs the fleet's own jobs under gpu-fleet-ops" in p
               for p in problems(raw))


@pytest.mark.parametrize("limit,secs", [("INFINITE", None), ("30", 1800), ("1:30", 90), ("2:00:00", 7200),
                                        ("1-0", 86400), ("1-2:03:04", 93784), ("0-0:0:5", 5)])
def test_slurm_time_limits_in_seconds(limit, secs):
    assert slurm_seconds(limit) == secs
