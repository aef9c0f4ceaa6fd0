"""SlurmAccounting (components/providers/sacct.py): every team's objects read in one probe of two
sacctmgr calls, planned field by field, and never removed under queued jobs."""

from __future__ import annotations

import pytest

from components.config.load import parse_fleet_config
from components.layers.tenancy.render import accounting_objects
from components.providers.parts import PlanRefused
from components.providers.sacct import SacctObjectsProvider, bundle_parse, bundle_probe_script

from .common import tenancy_raw

CONN = {"name": "storage", "host": "192.0.2.10"}


def props(teams: int = 3) -> dict:
    raw = tenancy_raw()
    t = raw["gpu-fleet:tenancy"]
    if teams > 3:
        t["teams"] = [{"name": f"team{i}", "guaranteed": {"v100": 0}, "fairshare": 1 + i % 7,
                       "members": [f"user{i}"]} for i in range(teams)]
        t["default_team"] = {}
    cfg = parse_fleet_config(raw, "full")
    return {"conn": CONN, "bundle": "tenancy-accounting", "cluster": "full",
            "members": accounting_objects(cfg.tenancy, cfg.slurm.canary_user), "records": None}


def printed(p: dict, qos: dict[str, dict], assoc: dict[tuple[str, str], dict], queue: str = "") -> str:
    """What the probe prints for the objects given (parsable2, in the probe's own column order)."""
    script = bundle_probe_script(p["cluster"], p["members"])[2]
    qcols = script.split("format=", 1)[1].split(";", 1)[0].split(",")
    acols = script.split("format=", 2)[2].split(";", 1)[0].split(",")
    out = ["|".join(({"Name": name} | f).get(c, "") for c in qcols) for name, f in qos.items()]
    out.append("@@gpu-fleet-qos-end")
    out += ["|".join(({"Cluster": p["cluster"], "Account": a, "User": u, "Partition": ""} | f).get(c, "")
                     for c in acols) for (a, u), f in assoc.items()]
    out.append("@@gpu-fleet-assoc-end")
    return "\n".join(out) + "\n" + queue


def as_applied(p: dict) -> str:
    """The probe's output once every member is in place as asked (printed the way sacctmgr does)."""
    qos, assoc = {}, {}
    for m in p["members"]:
        f = dict(m["fields"])
        if "GraceTime" in f:
            f["GraceTime"] = "00:02:00"
        if "PreemptExemptTime" in f:
            f["PreemptExemptTime"] = "00:05:00"
        if m["kind"] == "qos":
            qos[m["name"]] = f
        elif m["kind"] == "account":
            assoc[(m["name"], "")] = f
        else:
            assoc[(m["account"], m["name"])] = f
    return printed(p, qos, assoc)


def test_two_hundred_teams_are_read_with_two_sacctmgr_calls_in_one_command():
    p = props(200)
    argv = bundle_probe_script(p["cluster"], p["members"])
    assert argv[:2] == ["sh", "-c"] and argv[2].count("sacctmgr") == 2 and argv[2].count("squeue -h") == 1
    assert len(p["members"]) == 1 + 200 + 1 + 200 + 1 + 200  # QOS, accounts, users
    prov = SacctObjectsProvider()
    obs = prov.parse(p, as_applied(p))
    assert all(obs[k]["present"] for k in prov.members(p)), [k for k in prov.members(p) if not obs[k]["present"]]
    assert prov.plan(p, obs, {}) == []  # nothing differs: a no-op `up` sends no sacctmgr


def test_an_absent_cluster_creates_everything_in_order():
    p = props()
    prov = SacctObjectsProvider()
    obs = prov.parse(p, printed(p, {}, {}))
    adds = [s.argv[3:5] for s in prov.plan(p, obs, {}) if s.argv[2] == "add"]
    assert adds[:6] == [["account", "gpu-fleet-ops"], ["user", "fleetcanary"], ["qos", "scavenger"],
                        ["qos", "vision"], ["qos", "speech"], ["qos", "infra"]]
    assert adds[6:] == [["account", "vision"], ["account", "speech"],
                        ["account", "infra"], ["user", "alice"], ["user", "bob"],
                        ["user", "carol"], ["user", "dave"], ["user", "carol"]]  # carol's default (speech) first


def test_a_qos_edited_by_hand_is_one_modify_of_that_field():
    p = props()
    text = as_applied(p).replace("gres/gpu=48,gres/gpu:v100=48", "gres/gpu=99")
    prov = SacctObjectsProvider()
    obs = prov.parse(p, text)
    assert prov.state(p, obs)["state"]["sacct:qos:vision"]["fields"]["GrpTRES"] == "gres/gpu=99"
    [step] = prov.plan(p, obs, {})
    assert step.argv == ["sacctmgr", "-i", "modify", "qos", "where", "name=vision", "set",
                         "GrpTRES=gres/gpu:v100=48,gres/gpu=48"]


def test_a_team_with_queued_jobs_is_not_removed_and_the_jobs_are_named():
    p = props()
    prov = SacctObjectsProvider()
    gone = {**p, "members": [m for m in p["members"] if "speech" in (m["name"], m.get("account"))],
            "records": {}}
    gone["records"] = {k: {"created": True, "before": {}} for k in prov.members(gone)}
    obs = prov.parse(gone, as_applied(gone) + "speech|4711\nvision|4712\nspeech|4713\n")
    with pytest.raises(PlanRefused) as exc:
        prov.plan_delete(gone, obs)
    assert str(exc.value).startswith("account speech still has queued or running jobs (4711, 4713)")
    # with no job under it: its users, then its account, then its QOS (history stays: sacctmgr keeps it)
    obs = prov.parse(gone, as_applied(gone) + "vision|4712\n")
    steps = prov.plan_delete(gone, obs)
    assert [s.argv[2:5] for s in steps if s.argv[0] == "sacctmgr"] == [
        ["delete", "user", "where"], ["delete", "user", "where"], ["delete", "account", "where"],
        ["delete", "qos", "where"]]


def test_without_slurmctld_the_queue_is_unknown_and_a_rollback_proceeds():
    p = props()
    obs = bundle_parse(p["cluster"], p["members"], as_applied(p) + "@@gpu-fleet-squeue-failed\n")
    assert obs["@jobs"] is None
