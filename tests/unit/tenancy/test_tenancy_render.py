"""The tenancy renderers: accounting objects and the Slurm layer's section, against golden files."""

from __future__ import annotations

import json

from components.config.load import parse_fleet_config
from components.layers.slurm.component import restart_key
from components.layers.slurm.render import render_cgroup_conf, render_gres_conf, render_slurm_conf
from components.layers.tenancy.render import accounting_objects, ops_objects, scheduling, team_objects, team_tres
from tests.unit.slurm.test_slurm_render import check_golden

from .common import tenancy_raw


def cfg():
    return parse_fleet_config(tenancy_raw(), "full")


def test_golden_objects_section_and_topology():
    c = cfg()
    objs = accounting_objects(c.tenancy, c.slurm.canary_user)
    check_golden("tenancy.objects.json", json.dumps(objs, indent=1) + "\n")
    sched = scheduling(c.tenancy, c.slurm_nodes())
    check_golden("tenancy.slurm.conf", render_slurm_conf(
        c.slurm, c.hosts.controller, c.slurm_nodes(), acceptance=True, accounting_host="storage", scheduling=sched))
    check_golden("tenancy.topology.conf", sched.files["topology.conf"])
    check_golden("tenancy.gres.conf", render_gres_conf(c.slurm, c.slurm_nodes()[:2], sched.shards_per_gpu))


def test_shards_are_a_gres_type_counted_per_gpu_and_accounted():
    c = cfg()
    sched = scheduling(c.tenancy, c.slurm_nodes())
    conf = render_slurm_conf(c.slurm, c.hosts.controller, c.slurm_nodes(), acceptance=True,
                             accounting_host="storage", scheduling=sched)
    assert "GresTypes=gpu,shard" in conf and ",gres/shard" in conf.split("AccountingStorageTRES=")[1].split()[0]
    assert " Gres=gpu:v100:8,shard:32 " in conf
    gres = render_gres_conf(c.slurm, c.slurm_nodes()[:1], sched.shards_per_gpu)
    assert gres.count("NodeName=gpu01 Name=shard Count=4 File=/dev/nvidia") == 8


def test_objects_come_in_the_order_sacctmgr_needs():
    c = cfg()
    assert ops_objects(c.tenancy, c.slurm.canary_user) == [  # no TRES: before slurmctld registers any
        {"kind": "account", "name": "gpu-fleet-ops", "fields": {"Fairshare": "1"}},
        {"kind": "user", "name": "fleetcanary", "account": "gpu-fleet-ops", "fields": {}}]
    objs = team_objects(c.tenancy)
    kinds = [o["kind"] for o in objs]
    assert kinds == sorted(kinds, key=["qos", "account", "user"].index)  # QOS, then accounts, then users
    assert objs[0]["name"] == "scavenger"  # team QOS list it in Preempt
    team_qos = [o for o in objs if o["kind"] == "qos" and o["name"] != "scavenger"]
    assert all(o["fields"]["Preempt"] == "scavenger" for o in team_qos)
    scav = objs[0]["fields"]
    assert "Preempt" not in scav and scav["PreemptMode"] == "requeue"  # borrowing never preempts
    assert (scav["GraceTime"], scav["MaxTRESPerAccount"]) == ("120", "gres/gpu=32")
    carol = [o["account"] for o in objs if o["kind"] == "user" and o["name"] == "carol"]
    assert carol == ["speech", "vision"]  # her default team first


def test_a_team_quota_binds_typed_and_untyped_requests():
    assert team_tres({"v100": 8, "a100": 4}) == "gres/gpu=12,gres/gpu:a100=4,gres/gpu:v100=8"


def test_the_section_restarts_the_daemons_and_without_tenancy_nothing_changes():
    c = cfg()
    nodes = c.slurm_nodes()
    sched = scheduling(c.tenancy, nodes)
    args = (c.slurm, c.hosts.controller, nodes)
    plain = render_slurm_conf(*args, acceptance=True, accounting_host="storage")
    off = scheduling(c.tenancy.model_copy(update={"enabled": False}), nodes)
    assert not off and render_slurm_conf(*args, acceptance=True, accounting_host="storage", scheduling=off) == plain
    with_t = render_slurm_conf(*args, acceptance=True, accounting_host="storage", scheduling=sched)
    gres, cg = render_gres_conf(c.slurm, nodes), render_cgroup_conf(c.slurm)
    assert restart_key(with_t, cg, gres) != restart_key(plain, cg, gres)
    # the topology alone (a node moved between leaves) restarts too
    assert restart_key(with_t, cg, gres, "topology.conf\nA") != restart_key(with_t, cg, gres, "topology.conf\nB")
    assert "NodeName=gpu01 " in with_t and "Features=leaf-leaf1 " in with_t.split("NodeName=gpu01 ")[1].split("\n")[0]
