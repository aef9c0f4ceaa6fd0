"""The acceptance layer's config: the model's bounds and check(cfg)'s rules against the Slurm
nodes, through parse_fleet_config as a stack would be read, and check() on its own."""

from __future__ import annotations

import pytest

from components.config.fleet import LAYERS
from components.config.load import parse_fleet_config
from components.errors import ConfigError
from components.layers.acceptance.config import AcceptanceLayer, check
from tests.conftest import fleet14, stack_config


def canary(**acceptance) -> dict:
    raw = stack_config("canary")
    if acceptance:
        raw["gpu-fleet:acceptance"] = acceptance
    return raw


def problems(raw: dict, source: str = "canary") -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_fleet_config(raw, source)
    return e.value.problems


def test_the_layer_is_registered_with_its_check():
    [entry] = [e for e in LAYERS if e.key == "acceptance"]
    assert entry.model is AcceptanceLayer and entry.check is check


def test_defaults_every_node_and_256_mib():
    cfg = parse_fleet_config(canary(), "canary")
    a = cfg.acceptance
    assert (a.enabled, a.min_nodes, a.job_mem_mib, a.job_timeout_s) == (True, None, 256, 300)
    assert check(cfg) == []


def test_min_nodes_up_to_the_slurm_nodes_is_accepted():
    assert parse_fleet_config(canary(min_nodes=1), "canary").acceptance.min_nodes == 1
    assert parse_fleet_config({**fleet14(), "gpu-fleet:acceptance": {"min_nodes": 14}}, "full").acceptance.min_nodes == 14


def test_min_nodes_larger_than_the_slurm_nodes_is_one_problem_naming_the_field():
    [p] = problems(canary(min_nodes=2))
    assert p.startswith("gpu-fleet:acceptance.min_nodes: 2 ")
    assert "1 nodes in Slurm partitions" in p
    [p] = problems({**fleet14(), "gpu-fleet:acceptance": {"min_nodes": 15}}, "full")
    assert p.startswith("gpu-fleet:acceptance.min_nodes: 15 ") and "14 nodes" in p


def test_job_mem_above_a_nodes_real_memory_is_one_problem_naming_the_field_and_node():
    [p] = problems(canary(job_mem_mib=184001))
    assert p.startswith("gpu-fleet:acceptance.job_mem_mib: 184001 MiB")
    assert p.endswith("gpu01")
    assert parse_fleet_config(canary(job_mem_mib=184000), "canary").acceptance.job_mem_mib == 184000


def test_job_mem_names_only_the_nodes_too_small():
    raw = fleet14()
    slurm = [n for n in raw["gpu-fleet:nodes"] if n["owner"] == "slurm"]
    small = slurm[3]
    small["real_memory_mib"] = 1024
    raw["gpu-fleet:acceptance"] = {"job_mem_mib": 2048}
    [p] = problems(raw, "full")
    assert p.startswith("gpu-fleet:acceptance.job_mem_mib: 2048 MiB")
    assert p.endswith(f"of {small['name']}")


def test_both_rules_broken_give_two_problems():
    ps = problems(canary(min_nodes=3, job_mem_mib=200000))
    assert len(ps) == 2
    assert [p.split(":")[1].split(" ")[0] for p in ps] == ["acceptance.min_nodes", "acceptance.job_mem_mib"]


def test_acceptance_disabled_gives_no_problem():
    cfg = parse_fleet_config(canary(enabled=False, min_nodes=5, job_mem_mib=999999), "canary")
    assert cfg.acceptance.enabled is False
    assert check(cfg) == []


def test_slurm_disabled_gives_no_problem():
    cfg = parse_fleet_config(canary(), "canary")
    cfg = cfg.model_copy(update={"acceptance": AcceptanceLayer(min_nodes=9, job_mem_mib=999999),
                                 "slurm": cfg.slurm.model_copy(update={"enabled": False})})
    assert check(cfg) == []
    # the same acceptance with Slurm on is refused twice
    on = cfg.model_copy(update={"slurm": cfg.slurm.model_copy(update={"enabled": True})})
    assert len(check(on)) == 2


@pytest.mark.parametrize("field, value, bound", [("min_nodes", 0, "greater than or equal to 1"),
                                                 ("min_nodes", -1, "greater than or equal to 1"),
                                                 ("job_mem_mib", 63, "greater than or equal to 64"),
                                                 ("job_timeout_s", 9, "greater than or equal to 10")])
def test_the_model_refuses_values_below_its_bounds(field, value, bound):
    [p] = problems(canary(**{field: value}))
    assert p.startswith(f"gpu-fleet:acceptance.{field}: ") and bound in p


def test_an_unknown_field_is_refused():
    [p] = problems(canary(min_node=1))
    assert p == "gpu-fleet:acceptance.min_node: unknown field"
