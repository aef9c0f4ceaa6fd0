"""Stack config validation: the committed stacks parse; each bad case names file and field."""

from __future__ import annotations

import json

import pytest

from components.config import parse_fleet_config
from components.errors import ConfigError, FleetError
from components.inventory import fleet_summary, host_records

SRC = "stacks/Pulumi.test.yaml"


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(raw, SRC)
    assert isinstance(exc.value, FleetError)
    assert all(f"  {SRC}: " in line for line in str(exc.value).splitlines()[1:])
    return exc.value.problems


def test_full_stack_is_the_seed_fleet(full_config):
    cfg = parse_fleet_config(full_config, "stacks/Pulumi.full.yaml")
    s = fleet_summary(cfg)
    assert s["nodes_by_owner"] == {"slurm": 1, "free": 1, "k3s": 12, "unreachable": 1}
    # The seed's production partition: 14 nodes, 1120 CPUs, 2,576,000 MiB, 112 V100.
    assert (s["slurm_nodes"], s["slurm_cpus"], s["slurm_memory_mib"], s["slurm_gpus"]) == (
        14, 1120, 2_576_000, 112,
    )
    assert s["pending_nodes"] == ["gpu15"] and s["canary_nodes"] == ["gpu01"]
    assert {n.gpus.model for n in cfg.nodes} == {"Tesla V100-SXM2-16GB"}
    assert all(n.address.startswith("192.0.2.") for n in cfg.nodes)


def test_canary_stack_has_one_canary_node(canary_config):
    cfg = parse_fleet_config(canary_config, "stacks/Pulumi.canary.yaml")
    assert [n.name for n in cfg.slurm_nodes()] == ["gpu01"] == [n.name for n in cfg.canary_nodes()]
    # storage and controller are one host in the seed: it appears once, with both roles.
    recs = {r.name: r for r in host_records(cfg)}
    assert recs["storage"].roles == ("storage", "controller")
    assert set(recs) == {"storage", "gpu01"}


def test_values_as_engine_json_text(full_config):
    """The engine hands structured values to the program as JSON strings."""
    raw = {k: json.dumps(v) for k, v in full_config.items()}
    assert parse_fleet_config(raw, SRC).slurm.partitions[0].name == "v100"


def test_other_namespaces_are_ignored(full_config):
    full_config["aws:region"] = "us-east-1"
    parse_fleet_config(full_config, SRC)


def test_unknown_top_level_key(full_config):
    full_config["gpu-fleet:storge"] = {"pool": "ai"}
    assert problems_of(full_config) == ["gpu-fleet:storge: unknown field"]


def test_unknown_nested_field_names_node(full_config):
    full_config["gpu-fleet:nodes"][3]["gpu"] = 8
    assert problems_of(full_config) == ["gpu-fleet:nodes[3] (gpu04).gpu: unknown field"]


def test_wrong_type(full_config):
    full_config["gpu-fleet:nodes"][0]["cpus"] = "eighty"
    [p] = problems_of(full_config)
    assert p.startswith("gpu-fleet:nodes[0] (gpu01).cpus: ") and "integer" in p


def test_missing_required_field(full_config):
    del full_config["gpu-fleet:nodes"][1]["owner"]
    assert problems_of(full_config) == ["gpu-fleet:nodes[1] (gpu02).owner: required field is missing"]


def test_bad_owner(full_config):
    full_config["gpu-fleet:nodes"][1]["owner"] = "kubernetes"
    [p] = problems_of(full_config)
    assert p.startswith("gpu-fleet:nodes[1] (gpu02).owner: ") and "'k3s'" in p


def test_duplicate_node_name(full_config):
    full_config["gpu-fleet:nodes"][4]["name"] = "gpu04"
    ps = problems_of(full_config)
    assert any(
        p.startswith("gpu-fleet:nodes[4] (gpu04).name: duplicate host name 'gpu04'")
        and "gpu-fleet:nodes[3] (gpu04)" in p for p in ps
    ), ps


def test_duplicate_address(full_config):
    full_config["gpu-fleet:nodes"][5]["address"] = "192.0.2.21"
    assert problems_of(full_config) == [
        "gpu-fleet:nodes[5] (gpu06).address: duplicate address '192.0.2.21' "
        "(also gpu-fleet:nodes[0] (gpu01))"
    ]


def test_node_address_may_not_reuse_storage(full_config):
    full_config["gpu-fleet:nodes"][0]["address"] = "192.0.2.10"
    [p] = problems_of(full_config)
    assert p.startswith("gpu-fleet:nodes[0] (gpu01).address: duplicate address")


def test_bad_address(full_config):
    full_config["gpu-fleet:nodes"][0]["address"] = "192.0.2.300_x"
    [p] = problems_of(full_config)
    assert p.startswith("gpu-fleet:nodes[0] (gpu01).address: ")


def test_gpu_count_zero_on_gpu_node(full_config):
    full_config["gpu-fleet:nodes"][2]["gpus"]["count"] = 0
    assert problems_of(full_config) == [
        "gpu-fleet:nodes[2] (gpu03).gpus.count: a GPU node needs at least 1 GPU (got 0); "
        "omit `gpus` for a CPU-only node"
    ]


def test_unreachable_node_in_partition(full_config):
    full_config["gpu-fleet:slurm"]["partitions"][0]["nodes"].append("gpu15")
    [p] = problems_of(full_config)
    assert p.startswith("gpu-fleet:slurm.partitions[0] (v100).nodes[14]: node 'gpu15' is unreachable")


def test_k3s_node_in_partition_needs_retirement(full_config):
    full_config["gpu-fleet:k3s_retirement"]["retire"].remove("gpu07")
    [p] = problems_of(full_config)
    assert p.startswith("gpu-fleet:slurm.partitions[0] (v100).nodes[6]: node 'gpu07' is owned by k3s")


def test_unknown_node_in_partition(full_config):
    full_config["gpu-fleet:slurm"]["partitions"][0]["nodes"][1] = "gpu99"
    assert "gpu-fleet:slurm.partitions[0] (v100).nodes[1]: unknown node 'gpu99'" in problems_of(
        full_config
    )


def test_retiring_a_node_not_owned_by_k3s(full_config):
    full_config["gpu-fleet:k3s_retirement"]["retire"].append("gpu02")
    assert problems_of(full_config) == [
        "gpu-fleet:k3s_retirement.retire[12]: node 'gpu02' is owned by free, not k3s"
    ]


def test_same_uid_for_slurm_and_munge(full_config):
    full_config["gpu-fleet:slurm"]["slurm_uid"] = 440
    assert problems_of(full_config) == [
        "gpu-fleet:slurm.munge_uid: must differ from slurm_uid (440)"
    ]


def test_munge_ids_must_be_system_ids(full_config):
    full_config["gpu-fleet:slurm"]["munge_uid"] = 64031
    [p] = problems_of(full_config)
    assert p.startswith("gpu-fleet:slurm.munge_uid: 64031 is not a system id (100-999)")


def test_controller_half_matching_storage(full_config):
    full_config["gpu-fleet:hosts"]["controller"] = {"name": "storage", "address": "192.0.2.11"}
    [p] = problems_of(full_config)
    assert p.startswith("gpu-fleet:hosts.controller: shares a name or address")


def test_every_problem_reported_at_once(full_config):
    full_config["gpu-fleet:nodes"][2]["gpus"]["count"] = 0
    full_config["gpu-fleet:nodes"][3]["cpus"] = -1
    full_config["gpu-fleet:bogus"] = 1
    ps = problems_of(full_config)
    assert len(ps) == 3
    assert {p.split(":")[1].split(".")[0] for p in ps} == {"nodes[2] (gpu03)", "nodes[3] (gpu04)", "bogus"}


def test_cross_checks_all_reported(full_config):
    full_config["gpu-fleet:slurm"]["partitions"][0]["nodes"] += ["gpu15", "gpu99"]
    full_config["gpu-fleet:nodes"][5]["address"] = "192.0.2.21"
    assert len(problems_of(full_config)) == 3


def test_accounting_backups_must_live_outside_the_datadir(full_config):
    """Rollback removes the datadir after its dump is proven: a dump inside it would go too."""
    full_config["gpu-fleet:accounting"] = {"datadir": "/srv/db", "backup_dir": "/srv/db/backups"}
    [p] = problems_of(full_config)
    assert p.startswith("gpu-fleet:accounting.backup_dir: /srv/db/backups is inside accounting.datadir"), p
    full_config["gpu-fleet:accounting"] = {"datadir": "/srv/db", "backup_dir": "/srv/db-backups"}
    assert parse_fleet_config(full_config, SRC).accounting.backup_dir == "/srv/db-backups"
