"""SacctObject (components/providers/sacct.py): the sacctmgr probe's parser and the pure
per-field planner, idempotence included (re-planning on the state the steps leave gives none)."""

from __future__ import annotations

import pytest

from components.providers.parts import PlanRefused
from components.providers.sacct import SacctObjectProvider, canonical, parse, plan, plan_fields, probe_argv

QOS = {"kind": "qos", "name": "gpu", "account": None, "cluster": None,
       "fields": {"GrpTRES": "gres/gpu=8", "MaxTRESPerAccount": "gres/gpu=4", "Priority": "10",
                  "Preempt": "scavenger,low", "PreemptMode": "REQUEUE", "GraceTime": "00:05:00"}}
USER = {"kind": "user", "name": "alice", "account": "ml", "cluster": "lab", "fields": {"MaxJobs": "4"}}
COLS = ["Name", "GraceTime", "GrpTRES", "MaxTRESPerAccount", "Preempt", "PreemptMode", "Priority"]


def printed(**fields: str) -> str:
    """One `show qos` line as sacctmgr prints it (parsable2), in the probe's column order."""
    row = {"Name": "gpu", **fields}
    return "|".join(row.get(c, "") for c in COLS) + "\n"


def clock(seconds: str) -> str:
    """A time in seconds as sacctmgr prints it: [days-]HH:MM:SS."""
    d, s = divmod(int(seconds), 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{d}-{text}" if d else text


def applied(props: dict, obs: dict, steps) -> dict:
    """The state the steps leave, as sacctmgr would print it (each `set F=V` taken literally,
    a TRES -1 dropped, GraceTime's seconds printed as a clock); GraceTime must be set in whole
    seconds, as sacctmgr refuses anything else ("Invalid value for GraceTime (00:05:00)")."""
    fields = dict(obs["fields"])
    for s in steps:
        specs: list[str] = []
        if s.argv[2] == "add":
            fields = {f: "" for f in props["fields"]}
            # the fields given with the add: after the name and the where-like keys
            specs = [a for a in s.argv[5:] if "=" in a and a.split("=", 1)[0] not in ("cluster", "account")]
        elif "set" in s.argv:
            specs = [s.argv[-1]]
        for spec in specs:
            f, _, v = spec.partition("=")
            if f == "GraceTime" and v != "-1":
                assert v.isdigit(), f"sacctmgr refuses GraceTime={v}"
                v = clock(v)
            fields[f] = ",".join(p for p in v.split(",") if not p.endswith("=-1")) if v != "-1" else ""
    return {"present": True, "fields": fields}


def test_the_probe_asks_for_the_managed_fields_only():
    assert probe_argv(QOS) == ["sacctmgr", "--noheader", "--parsable2", "show", "qos", "where", "name=gpu",
                               "format=" + ",".join(COLS)]
    assert probe_argv(USER) == ["sacctmgr", "--noheader", "--parsable2", "show", "association", "where",
                                "cluster=lab", "account=ml", "user=alice",
                                "format=Cluster,Account,User,Partition,MaxJobs"]


def test_parse_finds_the_object_and_nothing_else():
    assert parse(QOS, "") == {"present": False, "fields": {}}
    got = parse(QOS, "sacctmgr: warning\n" + printed(GrpTRES="gres/gpu=8", Priority="10"))
    assert got["present"] and got["fields"]["GrpTRES"] == "gres/gpu=8" and got["fields"]["Preempt"] == ""
    rows = "lab|ml|||\nlab|ml|bob||2\nlab|ml|alice|p1|9\nlab|ml|alice||4\n"
    assert parse(USER, rows) == {"present": True, "fields": {"MaxJobs": "4"}}
    assert parse({**USER, "name": "carol"}, rows)["present"] is False


def test_an_absent_qos_is_added_with_its_fields_in_one_call_and_the_replan_is_empty():
    obs = parse(QOS, "")
    [step] = plan(QOS, obs, QOS["fields"])
    assert step.argv == ["sacctmgr", "-i", "add", "qos", "gpu",  # in the kind's field order
                         "Priority=10", "GraceTime=300", "Preempt=low,scavenger", "PreemptMode=requeue",
                         "GrpTRES=gres/gpu=8", "MaxTRESPerAccount=gres/gpu=4"]
    assert plan(QOS, applied(QOS, obs, [step]), QOS["fields"]) == []


def test_an_absent_account_is_added_on_its_cluster_with_its_qos_before_the_default_and_no_empty_field():
    acct = {"kind": "account", "name": "vision", "account": None, "cluster": "lab",
            "fields": {"DefaultQOS": "vision", "QOS": "vision,scavenger", "Fairshare": "30", "MaxJobs": ""}}
    [step] = plan(acct, {"present": False, "fields": {}}, acct["fields"])
    assert step.argv == ["sacctmgr", "-i", "add", "account", "vision", "cluster=lab", "Fairshare=30",
                         "QOS=scavenger,vision", "DefaultQOS=vision"]


def test_a_hand_edit_is_one_step_for_that_field_and_unchanged_fields_say_why():
    there = {"present": True, "fields": {"GrpTRES": "cpu=4,gres/gpu=99", "MaxTRESPerAccount": "gres/gpu=4",
                                         "Priority": "10", "Preempt": "low,scavenger", "PreemptMode": "requeue",
                                         "GraceTime": "00:05:00"}}
    plans = {p.field: p for p in plan_fields(QOS, QOS["fields"], there["fields"])}
    assert plans["GrpTRES"].step.argv[-1] == "GrpTRES=gres/gpu=8,cpu=-1"
    assert plans["GrpTRES"].step.why == "GrpTRES cpu=4,gres/gpu=99 -> gres/gpu=8"
    assert plans["Priority"].step is None and plans["Priority"].why == "no change: Priority is 10 already"
    steps = plan(QOS, there, QOS["fields"])
    assert len(steps) == 1
    assert plan(QOS, applied(QOS, there, steps), QOS["fields"]) == []


@pytest.mark.parametrize("field, have, set_", [
    ("GrpTRES", "cpu=4,gres/gpu=8", "GrpTRES=cpu=-1,gres/gpu=-1"),
    ("Preempt", "low", "Preempt="),
    ("Priority", "10", "Priority=-1"),
])
def test_an_empty_wish_clears_the_field(field, have, set_):
    props = {**QOS, "fields": {field: ""}}
    [p] = plan_fields(props, props["fields"], {field: have})
    assert p.step.argv[-1] == set_


def test_equal_values_in_another_spelling_need_nothing():
    assert canonical("GrpTRES", "gres/gpu=8,cpu=4") == canonical("GrpTRES", "cpu=4,gres/gpu=8")
    assert canonical("Preempt", "b,a,a") == "a,b" and canonical("PreemptMode", "REQUEUE") == "requeue"


def test_a_description_compares_as_sacctmgr_stores_it():
    props = {**QOS, "fields": {"Description": "Team's GPUs"}}
    [same] = plan_fields(props, props["fields"], {"Description": "team`s gpus"})
    assert same.step is None
    [other] = plan_fields(props, props["fields"], {"Description": "team`s cpus"})
    assert other.step is not None and other.step.argv[-1] == "Description=team`s gpus"


@pytest.mark.parametrize("asked", ["00:05:00", "5:00", "300", "0-00:05:00"])
def test_grace_time_is_set_in_seconds_and_equal_to_the_clock_sacctmgr_prints(asked):
    props = {**QOS, "fields": {"GraceTime": asked}}
    [p] = plan_fields(props, props["fields"], {"GraceTime": ""})
    assert p.step.argv[-1] == "GraceTime=300"
    [same] = plan_fields(props, props["fields"], {"GraceTime": "00:05:00"})
    assert same.step is None
    assert canonical("GraceTime", "1-00:00:00") == "86400" and canonical("GraceTime", "soon") == "soon"


def test_an_unknown_field_is_refused_before_any_read():
    with pytest.raises(PlanRefused, match="qos gpu: no field MaxNodes"):
        probe_argv({**QOS, "fields": {"MaxNodes": "2"}})


def test_delete_removes_what_create_added_and_restores_what_it_found():
    p = SacctObjectProvider()
    there = {"present": True, "fields": {"MaxJobs": "4"}}
    assert [s.argv for s in p.plan_delete({**USER, "created": True}, there)] == [
        ["sacctmgr", "-i", "delete", "user", "where", "name=alice", "account=ml", "cluster=lab"]]
    found = {**USER, "created": False, "before": {"MaxJobs": "2"}}
    assert [s.argv[-1] for s in p.plan_delete(found, there)] == ["MaxJobs=2"]
    assert p.plan_delete({**USER, "created": True}, {"present": False, "fields": {}}) == []
    assert p.remember(USER, there) == {"created": False, "before": {"MaxJobs": "4"}}


def test_an_account_created_here_loses_its_record_once_no_cluster_holds_it(tmp_path):
    """sacctmgr keeps an account's record after its last association goes (the lab: `show account`
    still listed it after destroy); the second step removes it only when no cluster holds it."""
    import subprocess

    acct = {"kind": "account", "name": "gf", "account": None, "cluster": "lab", "fields": {}}
    steps = SacctObjectProvider().plan_delete({**acct, "created": True}, {"present": True, "fields": {}})
    assert steps[0].argv == ["sacctmgr", "-i", "delete", "account", "where", "name=gf", "cluster=lab"]
    stub = tmp_path / "sacctmgr"
    for held, deleted in (("other\n", False), ("", True)):
        log = tmp_path / "calls"
        log.write_text("")
        stub.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\n[ \"$3\" = show ] && printf '{held}'\nexit 0\n")
        stub.chmod(0o755)
        subprocess.run(steps[1].argv, check=True, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
        calls = log.read_text().splitlines()
        assert calls[0] == "-n -P show association where account=gf format=Cluster"
        assert (calls[1:] == ["-i delete account where name=gf"]) is deleted, calls


def test_an_account_gets_its_qos_list_before_its_default_qos():
    """sacctmgr refuses a DefaultQOS that is not in the association's QOS list yet."""
    acct = {"kind": "account", "name": "vision", "account": None, "cluster": "lab",
            "fields": {"DefaultQOS": "vision", "QOS": "vision,scavenger", "Fairshare": "40"}}
    steps = plan(acct, {"present": True, "fields": {"DefaultQOS": "normal", "QOS": "normal", "Fairshare": "1"}},
                 acct["fields"])
    assert [s.argv[-1] for s in steps] == ["Fairshare=40", "QOS=scavenger,vision", "DefaultQOS=vision"]


def test_preempt_exempt_time_is_set_as_a_clock_and_compared_in_seconds():
    """A bare number would be minutes to sacctmgr's time parser; it prints a clock back."""
    qos = {**QOS, "fields": {"PreemptExemptTime": "300"}}
    [step] = plan_fields(qos, qos["fields"], {"PreemptExemptTime": ""})
    assert step.step is not None and step.step.argv[-1] == "PreemptExemptTime=0:05:00"
    [same] = plan_fields(qos, qos["fields"], {"PreemptExemptTime": "00:05:00"})
    assert same.step is None
