"""Hot spares (issue 36, item 3): the config's errors, the spares' Weight and order in slurm.conf
(golden), the lent reservation's probe parser, plan and who-stands-in-for-whom (the policy:
tests/policy/test_health_policies.py).

The reservation's plan is tested against `scontrol show reservation -o` text as Slurm 22.05 and
24.11 print it; the lab test (tests/lab/test_health.py) runs it on real slurmctld."""

from __future__ import annotations

import copy

import pytest

from components.config.load import parse_fleet_config
from components.errors import ConfigError, FleetError
from components.layers.health import render
from components.layers.health.config import SPARE_WEIGHT
from components.layers.health.reservation import LentReservationProvider, parse_reservation, standing_in
from components.layers.slurm.render import render_slurm_conf
from components.layers.slurm.scheduling import Scheduling
from tests.conftest import stack_config
from tests.unit.slurm.test_slurm_render import check_golden

SPARES = {"nodes": ["gpu03"], "reservations": [
    {"name": "train", "partition": "reserve", "node_count": 2, "users": ["alice"]}]}


def three_nodes(spares=SPARES, partitions=None) -> dict:
    raw = stack_config("canary")
    first = raw["gpu-fleet:nodes"][0]
    for i in (2, 3):
        raw["gpu-fleet:nodes"].append({**copy.deepcopy(first), "name": f"gpu0{i}", "address": f"192.0.2.2{i}",
                                       "canary": False})
    raw["gpu-fleet:slurm"]["partitions"] = partitions or [
        {"name": "canary", "nodes": ["gpu01", "gpu02"], "default": True},
        {"name": "reserve", "nodes": ["gpu01", "gpu02", "gpu03"]}]
    raw["gpu-fleet:guards"] = {"enabled": True}
    raw["gpu-fleet:health"] = {"enabled": True, "spares": spares}
    return raw


def conf_of(raw: dict) -> str:
    cfg = parse_fleet_config(raw, "canary")
    sched = Scheduling(title="node health (gpu-fleet:health)", lines=render.slurm_lines(cfg.health),
                       weights=render.spare_weights(cfg.health))
    return render_slurm_conf(cfg.slurm, cfg.hosts.controller, cfg.slurm_nodes(), acceptance=True, scheduling=sched)


def test_a_spare_weighs_more_and_comes_last_in_slurm_conf():
    # the spare listed first in the stack still comes last: 22.05 fills a reservation in node order
    raw = three_nodes()
    raw["gpu-fleet:nodes"].insert(0, raw["gpu-fleet:nodes"].pop())
    conf = conf_of(raw)
    check_golden("health.spares.slurm.conf", conf)
    nodes = [ln for ln in conf.splitlines() if ln.startswith("NodeName=") and "NodeAddr" in ln]
    assert [ln.split()[0] for ln in nodes] == ["NodeName=gpu01", "NodeName=gpu02", "NodeName=gpu03"]
    assert f"Weight={SPARE_WEIGHT}" in nodes[2] and "Weight" not in nodes[0] + nodes[1]
    assert "PartitionName=canary Nodes=gpu01,gpu02 Default=YES" in conf


@pytest.mark.parametrize("spares, partitions, field, words", [
    ({**SPARES, "nodes": ["gpu09"]}, None, "health.spares.nodes[0]", "'gpu09' is not a node Slurm runs on"),
    (SPARES, [{"name": "canary", "nodes": ["gpu01", "gpu02", "gpu03"], "default": True},
              {"name": "reserve", "nodes": ["gpu01", "gpu02", "gpu03"]}],
     "health.spares.nodes[0]", "is in the default partition 'canary'"),
    ({**SPARES, "reservations": [{**SPARES["reservations"][0], "partition": "nope"}]}, None,
     "health.spares.reservations[0].partition", "'nope' is not one of slurm.partitions"),
    ({**SPARES, "reservations": [{**SPARES["reservations"][0], "partition": "canary"}]}, None,
     "health.spares.reservations[0].partition", "holds none of the spares"),
    ({**SPARES, "reservations": [{**SPARES["reservations"][0], "node_count": 3}]}, None,
     "health.spares.reservations[0].node_count", "more than the 2 nodes of 'reserve' that are not spares"),
    ({**SPARES, "reservations": [{**SPARES["reservations"][0], "users": []}]}, None,
     "health.spares.reservations[0]", "name its users or accounts"),
    ({**SPARES, "reservations": [SPARES["reservations"][0], SPARES["reservations"][0]]}, None,
     "health.spares.reservations[1].name", "used twice"),
    ({**SPARES, "reservations": []}, None, "health.spares.reservations", "at least 1 item"),
    ({**SPARES, "lend_to": "x"}, None, "health.spares.lend_to", "unknown field"),
])
def test_bad_spares_config_names_the_field(spares, partitions, field, words):
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(three_nodes(spares, partitions), "stacks/Pulumi.canary.yaml")
    text = str(exc.value)
    assert f"gpu-fleet:{field}" in text and words in text, text


# ---- the lent reservation ------------------------------------------------------------------------

SHOW_2205 = ("ReservationName=train StartTime=2026-12-06T03:00:00 EndTime=2027-12-06T03:00:00 Duration=365-00:00:00 "
             "Nodes=node[1-2] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=reserve Flags=REPLACE_DOWN "
             "TRES=cpu=4 Users=fleetcanary,alice Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE "
             "BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n== hostnames\nnode1\nnode2\n")
SHOW_2411 = ("ReservationName=train StartTime=2026-12-06T03:00:00 EndTime=2027-12-06T03:00:00 Duration=365-00:00:00 "
             "Nodes=node[1,3] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=reserve Flags=REPLACE_DOWN,SPEC_NODES "
             "NodeName=node1 CoreIDs=0-1 NodeName=node3 CoreIDs=0-1 TRES=cpu=4 Users=alice,fleetcanary "
             "Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) "
             "MaxStartDelay=(null) Comment=(null)\n== hostnames\nnode1\nnode3\n")
PROPS = {"name": "train", "partition": "reserve", "node_count": 2, "users": ["fleetcanary", "alice"],
         "accounts": [], "spares": ["node3"]}
P = LentReservationProvider()


def test_the_probe_parser_reads_both_releases_and_absence():
    assert parse_reservation("absent\n") == {"present": False, "fields": {}, "nodes": []}
    for text, nodes in ((SHOW_2205, ["node1", "node2"]), (SHOW_2411, ["node1", "node3"])):
        obs = parse_reservation(text)
        st = P.state(PROPS, obs)
        assert obs["nodes"] == nodes and st["present"] and st["replace_down"] and st["node_count"] == 2
        assert st["users"] == ["alice", "fleetcanary"] and st["accounts"] == [] and st["partition"] == "reserve"


def test_absent_is_created_with_a_count_and_replace_down_then_nothing_to_do():
    [step] = P.plan(PROPS, parse_reservation("absent"), {})
    assert list(step.argv) == ["scontrol", "create", "reservation", "ReservationName=train", "PartitionName=reserve",
                               "NodeCnt=2", "StartTime=now", "Duration=UNLIMITED", "Flags=REPLACE_DOWN",
                               "Users=fleetcanary,alice"]
    assert P.plan(PROPS, parse_reservation(SHOW_2205), {}) == []


def test_a_changed_count_or_users_is_updated_and_a_missing_flag_added():
    obs = parse_reservation(SHOW_2205.replace("NodeCnt=2", "NodeCnt=1").replace("Flags=REPLACE_DOWN", "Flags=MAINT"))
    steps = P.plan({**PROPS, "users": ["bob"]}, obs, {})
    assert [list(s.argv) for s in steps] == [
        ["scontrol", "update", "ReservationName=train", "Flags+=REPLACE_DOWN"],
        ["scontrol", "update", "ReservationName=train", "NodeCnt=2", "Users=bob"]]


def test_a_reservation_of_the_name_on_another_partition_is_refused():
    with pytest.raises(FleetError, match="exists with PartitionName=other, the stack says reserve"):
        P.plan(PROPS, parse_reservation(SHOW_2205.replace("PartitionName=reserve", "PartitionName=other")), {})


def test_delete_removes_only_what_the_stack_created():
    obs = parse_reservation(SHOW_2205)
    assert [list(s.argv) for s in P.plan_delete({**PROPS, "existed": False}, obs)] == [
        ["scontrol", "delete", "ReservationName=train"]]
    assert P.plan_delete({**PROPS, "existed": True}, obs) == []
    assert P.plan_delete({**PROPS, "existed": False}, parse_reservation("absent")) == []


def test_who_stands_in_for_whom():
    assert standing_in(["node3"], ["node1", "node2"], ["node1", "node3"]) == {"node3": "node2"}
    assert standing_in(["node3"], ["node1", "node2"], ["node1", "node2"]) == {}
    # a node replaced by a regular node: no spare stands in
    assert standing_in(["node4"], ["node1", "node2"], ["node1", "node3"]) == {}
    st = P.state({**PROPS, "lent_from": ["node1", "node2"]}, parse_reservation(SHOW_2411))
    assert st["standing_in"] == {"node3": "node2"} and st["nodes"] == ["node1", "node3"]
