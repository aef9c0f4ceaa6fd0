"""The tenancy policies, called directly: the golden tenancy stack's objects (tenancy-ops and
tenancy-accounting, as the layer splits them) and slurm.conf pass every rule; each broken rule
fails with a sentence naming the object, the field and the fix; unknown values are skipped."""

from __future__ import annotations

import copy
import json

import pytest

from components.config.hosts import GpuSpec
from components.config.load import parse_fleet_config
from components.layers.tenancy.render import ops_objects, team_objects
from components.providers.sacct import SlurmAccounting
from tests.pulumi_cli import ROOT
from tests.unit.tenancy.common import tenancy_raw

from gpu_fleet_policies import relax, stackconfig, tenancy
from gpu_fleet_policies.pack import DESCRIPTIONS, KINDS, VALIDATORS, declared_levels

from .fakes import FILE, UNKNOWN_OBJ, UNKNOWN_STR, file_args, policy_resource, resource_args, stack_args, violations

GOLDEN = ROOT / "tests" / "golden"
OBJECTS = json.loads((GOLDEN / "tenancy.objects.json").read_text())
SLURM_CONF = (GOLDEN / "tenancy.slurm.conf").read_text()
CTL = {"name": "storage", "address": "192.0.2.10"}
POLICIES = {
    "tenancy-team-qos-bounds-gpus": ("stack", tenancy.validate_team_qos_bounds),
    "tenancy-no-suspend-preemption": ("resource", tenancy.validate_no_suspend),
    "tenancy-preemption-graph": ("stack", tenancy.validate_preemption_graph),
    "tenancy-guarantees-fit": ("stack", tenancy.validate_guarantees_fit),
}
STACK = [fn for kind, fn in POLICIES.values() if kind == "stack"]


@pytest.fixture(autouse=True)
def _stack():
    relax.reset()
    stackconfig.configure(tenancy_raw())  # the 14-node fleet of 112 V100 the golden files render
    yield
    stackconfig.configure(None)


def split(objs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(tenancy-ops, tenancy-accounting): the ops account and its users, then the teams'."""
    ops = [o for o in objs if o["kind"] == "account" and o["name"] == "gpu-fleet-ops"
           or o.get("account") == "gpu-fleet-ops"]
    return ops, [o for o in objs if o not in ops]


def members(objs: list[dict]) -> list[dict]:
    """As SlurmAccounting passes them (every member has `account`, field values are strings)."""
    return [{"kind": m["kind"], "name": m["name"], "account": m.get("account"),
             "fields": {k: str(v) for k, v in (m.get("fields") or {}).items()}} for m in objs]


def accounting(name: str, objs, **extra) -> dict:
    return {"conn": CTL, "bundle": name, "cluster": "v100",
            "members": members(objs) if isinstance(objs, list) else objs, "records": None, "state": None, **extra}


def stack(objs: list[dict] = OBJECTS):
    ops, teams = split(objs)
    return stack_args(policy_resource(tenancy.ACCOUNTING, accounting("tenancy-ops", ops), "tenancy-ops"),
                      policy_resource(tenancy.ACCOUNTING, accounting("tenancy-accounting", teams),
                                      "tenancy-accounting"))


def edited(**changes: dict) -> list[dict]:
    """The golden objects with fields changed: `vision={"GrpTRES": None}` drops the field of
    QOS vision; `account_vision={...}` changes the account's."""
    objs = copy.deepcopy(OBJECTS)
    for key, fields in changes.items():
        kind, _, name = key.rpartition("_")
        for o in objs:
            if o["name"] == name and o["kind"] == (kind or "qos"):
                for f, v in fields.items():
                    if v is None:
                        o["fields"].pop(f, None)
                    else:
                        o["fields"][f] = v
    return objs


def check(fn, objs=OBJECTS) -> list[str]:
    return violations(fn, stack(objs))


def conf(text: str, name: str = "storage-slurm.conf"):
    return file_args("/etc/slurm/slurm.conf", text, name, conn=CTL)


def qos_resource(objs, name="tenancy-accounting"):
    return resource_args(tenancy.ACCOUNTING, accounting(name, objs), name)


# ---- the pack and what it mirrors -----------------------------------------------------------

def test_registered_mandatory_with_their_kinds():
    for name, (kind, fn) in POLICIES.items():
        assert VALIDATORS[name] is fn and KINDS[name] == kind
        assert DESCRIPTIONS[name].endswith(".") and declared_levels()[name] == "mandatory"


def test_constants_mirror_the_program():
    assert tenancy.ACCOUNTING == f"pulumi-python:{SlurmAccounting._resource_type_name}"
    assert tenancy.DEFAULT_GPU_TYPE == GpuSpec.model_fields["type"].default
    assert tenancy.ROOT == ROOT


# ---- the golden tenancy stack passes -----------------------------------------------------------

def test_the_golden_objects_are_what_the_layer_renders():
    cfg = parse_fleet_config(tenancy_raw(), "tenancy")
    ops, teams = split(OBJECTS)
    assert ops == ops_objects(cfg.tenancy, cfg.slurm.canary_user)
    assert teams == team_objects(cfg.tenancy)


def test_the_golden_stack_passes_every_rule():
    for fn in STACK:
        assert check(fn) == [], fn.__name__
    ops, teams = split(OBJECTS)
    for objs in (ops, teams):
        assert violations(tenancy.validate_no_suspend, qos_resource(objs)) == []
    assert violations(tenancy.validate_no_suspend, conf(SLURM_CONF)) == []
    assert "PreemptMode=REQUEUE" in SLURM_CONF


def test_cancel_passes_too():
    assert violations(tenancy.validate_no_suspend, conf(SLURM_CONF.replace("PreemptMode=REQUEUE",
                                                                            "PreemptMode=CANCEL"))) == []
    objs = edited(scavenger={"PreemptMode": "cancel"})
    assert violations(tenancy.validate_no_suspend, qos_resource(objs)) == []


# ---- 1. a team's QOS bounds its GPUs -------------------------------------------------------------

def test_a_team_qos_without_grptres_is_refused():
    msgs = check(tenancy.validate_team_qos_bounds, edited(speech={"GrpTRES": None}))
    assert msgs == [
        'SlurmAccounting "tenancy-accounting" (QOS speech on storage) is the DefaultQOS of team account speech, '
        "but it has no GrpTRES, with no gres/gpu=<n> limit: the team's GPUs are unbounded; set "
        "GrpTRES=gres/gpu=<n>,gres/gpu:<type>=<n> to the team's guarantee (gpu-fleet:tenancy.teams[].guaranteed)."]


@pytest.mark.parametrize("grp, typed", [
    ("gres/gpu:v100=32", True),   # typed alone: an untyped request is not bound
    ("gres/gpu=-1,gres/gpu:v100=32", True),  # -1: no limit
    ("cpu=64,mem=512G", False),
])
def test_a_team_qos_without_a_gpu_limit_is_refused(grp, typed):
    msgs = check(tenancy.validate_team_qos_bounds, edited(speech={"GrpTRES": grp}))
    assert len(msgs) == 1, msgs
    assert msgs[0].startswith('SlurmAccounting "tenancy-accounting" (QOS speech on storage) is the DefaultQOS of '
                              f"team account speech, but it has GrpTRES={grp}, with no gres/gpu=<n> limit")
    assert ("a typed limit alone does not bind" in msgs[0]) is typed


def test_a_default_qos_no_resource_defines_is_refused():
    msgs = check(tenancy.validate_team_qos_bounds, edited(account_infra={"DefaultQOS": "normal"}))
    assert msgs == [
        'SlurmAccounting "tenancy-accounting" (account infra on storage) sets DefaultQOS=normal, a QOS no '
        "SlurmAccounting resource of the stack defines, so the GPU bound of team account infra cannot be "
        "checked; define the QOS in the tenancy layer's objects with GrpTRES=gres/gpu=<n>,gres/gpu:<type>=<n> "
        "(gpu-fleet:tenancy.teams[].guaranteed)."]


def test_the_qos_may_live_in_another_resource():
    ops, teams = split(OBJECTS)
    qos = [o for o in teams if o["kind"] == "qos"]
    rest = [o for o in teams if o["kind"] != "qos"]
    args = stack_args(policy_resource(tenancy.ACCOUNTING, accounting("tenancy-ops", ops + qos), "tenancy-ops"),
                      policy_resource(tenancy.ACCOUNTING, accounting("tenancy-accounting", rest), "tenancy-accounting"))
    for fn in STACK:
        assert violations(fn, args) == [], fn.__name__


# ---- 2. preemption never suspends (SUSPEND, GANG) ------------------------------------------------

WHY = "a suspended job keeps its GRES, so the GPUs it holds are not freed for the job that preempted it"


WHY_GANG = ("GANG time-slices jobs by suspending them in turn, and a suspended job keeps its GRES, so the GPUs it "
            "holds are not freed for another job either")
WHY_BOTH = f"SUSPEND and GANG both suspend jobs (GANG to time-slice them): {WHY}, nor for another job"


@pytest.mark.parametrize("mode, why", [
    ("SUSPEND", WHY), ("suspend", WHY),
    ("GANG", WHY_GANG), ("gang", WHY_GANG), ("REQUEUE,GANG", WHY_GANG), ("Cancel,Gang", WHY_GANG),
    ("GANG,SUSPEND", WHY_BOTH), ("gang,Suspend", WHY_BOTH),
])
def test_slurm_conf_preempt_mode_suspend_or_gang_is_refused(mode, why):
    text = SLURM_CONF.replace("PreemptMode=REQUEUE", f"PreemptMode={mode}")
    assert violations(tenancy.validate_no_suspend, conf(text)) == [
        f'File "storage-slurm.conf" (/etc/slurm/slurm.conf on storage) sets PreemptMode={mode}: {why}; set '
        "PreemptMode=REQUEUE or CANCEL (gpu-fleet:tenancy.preempt_mode)."]


@pytest.mark.parametrize("mode, why", [("SUSPEND", WHY), ("GANG", WHY_GANG), ("requeue,gang", WHY_GANG),
                                       ("SUSPEND,GANG", WHY_BOTH)])
def test_a_partition_preempt_mode_suspend_or_gang_is_refused(mode, why):
    text = SLURM_CONF.replace("PartitionName=v100 Nodes=", f"PartitionName=v100 PreemptMode={mode} Nodes=")
    assert violations(tenancy.validate_no_suspend, conf(text)) == [
        f'File "storage-slurm.conf" (/etc/slurm/slurm.conf on storage) gives partition v100 PreemptMode={mode}: '
        f"{why}; remove it or set PreemptMode=REQUEUE or CANCEL."]


def test_gang_in_both_places_is_refused_in_both():
    text = SLURM_CONF.replace("PreemptMode=REQUEUE", "PreemptMode=GANG").replace(
        "PartitionName=v100 Nodes=", "PartitionName=v100 PreemptMode=GANG Nodes=")
    msgs = violations(tenancy.validate_no_suspend, conf(text))
    assert len(msgs) == 2, msgs
    assert msgs[0].endswith(f"sets PreemptMode=GANG: {WHY_GANG}; set PreemptMode=REQUEUE or CANCEL "
                            "(gpu-fleet:tenancy.preempt_mode).")
    assert msgs[1].endswith(f"gives partition v100 PreemptMode=GANG: {WHY_GANG}; remove it or set "
                            "PreemptMode=REQUEUE or CANCEL.")


def test_a_node_copy_in_a_files_bundle_is_checked_too():
    from gpu_fleet_policies.common import each_member

    text = SLURM_CONF.replace("PreemptMode=REQUEUE", "PreemptMode=SUSPEND")
    bundle = resource_args("pulumi-python:dynamic/host:Files", {
        "conn": {"name": "gpu01", "address": "192.0.2.21"}, "bundle": "gpu01-slurm-config",
        "members": [{"path": "/etc/slurm/slurm.conf", "content": text, "mode": "0644"}]}, "gpu01-slurm-config")
    msgs = violations(each_member(tenancy.validate_no_suspend, "resource"), bundle)
    assert len(msgs) == 1 and msgs[0].startswith(
        'File "gpu01-slurm-config /etc/slurm/slurm.conf" (/etc/slurm/slurm.conf on gpu01) sets PreemptMode=SUSPEND')


def test_a_qos_preempt_mode_suspend_is_refused():
    _, teams = split(edited(scavenger={"PreemptMode": "suspend"}, vision={"PreemptMode": "gang,suspend"}))
    assert violations(tenancy.validate_no_suspend, qos_resource(teams)) == [
        f'SlurmAccounting "tenancy-accounting" (QOS scavenger on storage) sets PreemptMode=suspend: {WHY}; set '
        "PreemptMode=requeue or cancel (gpu-fleet:tenancy.opportunistic.preempt_mode, "
        "gpu-fleet:tenancy.preempt_mode).",
        f'SlurmAccounting "tenancy-accounting" (QOS vision on storage) sets PreemptMode=gang,suspend: {WHY}; set '
        "PreemptMode=requeue or cancel (gpu-fleet:tenancy.opportunistic.preempt_mode, "
        "gpu-fleet:tenancy.preempt_mode)."]


def test_unknown_values_and_other_files_are_skipped():
    v = tenancy.validate_no_suspend
    assert violations(v, conf(UNKNOWN_STR)) == []
    assert violations(v, file_args("/etc/slurm/cgroup.conf", "PreemptMode=SUSPEND\n")) == []
    assert violations(v, resource_args(tenancy.ACCOUNTING, accounting("tenancy-accounting", UNKNOWN_OBJ))) == []
    assert violations(v, resource_args(FILE, {"path": "/etc/slurm/slurm.conf"})) == []
    unknown = stack_args(policy_resource(tenancy.ACCOUNTING, accounting("tenancy-accounting", UNKNOWN_OBJ),
                                         "tenancy-accounting"))
    for fn in STACK:
        assert violations(fn, unknown) == [], fn.__name__
    # a GrpTRES computed during preview is checked on real values
    _, teams = split(OBJECTS)
    teams = members(teams)
    for m in teams:
        if m["kind"] == "qos" and m["name"] == "speech":
            m["fields"]["GrpTRES"] = UNKNOWN_STR
    args = stack_args(policy_resource(tenancy.ACCOUNTING, accounting("tenancy-accounting", teams),
                                      "tenancy-accounting"))
    assert violations(tenancy.validate_team_qos_bounds, args) == []


# ---- 3. preemption runs one way -------------------------------------------------------------------

def test_a_preemptable_qos_that_preempts_a_team_is_refused():
    msgs = check(tenancy.validate_preemption_graph, edited(scavenger={"Preempt": "infra"}))
    assert msgs == [
        'SlurmAccounting "tenancy-accounting" (QOS scavenger on storage) is preemptable (QOS infra, speech, vision '
        "preempt it), yet its Preempt names QOS infra, the DefaultQOS of team account infra: a job that may itself "
        "be preempted would take a team's guaranteed GPUs; remove infra from scavenger's Preempt (a team's QOS "
        "preempts the opportunistic one, never the other way).",
        'SlurmAccounting "tenancy-accounting" (QOS infra on storage) is in a Preempt cycle, infra -> scavenger -> '
        "infra (each QOS's Preempt names the next): preemption must run one way, or jobs preempt each other in "
        "turn and none keeps its GPUs; remove one of these Preempt entries."]


def test_a_preempt_cycle_without_a_team_is_refused():
    objs = copy.deepcopy(OBJECTS) + [
        {"kind": "qos", "name": "low", "fields": {"Preempt": "lower"}},
        {"kind": "qos", "name": "lower", "fields": {"Preempt": "lowest"}},
        {"kind": "qos", "name": "lowest", "fields": {"Preempt": "low"}},
        {"kind": "qos", "name": "selfish", "fields": {"Preempt": "selfish,scavenger"}},
    ]
    msgs = check(tenancy.validate_preemption_graph, objs)
    assert len(msgs) == 2, msgs
    assert msgs[0].startswith('SlurmAccounting "tenancy-accounting" (QOS low on storage) is in a Preempt cycle, '
                              "low -> lower -> lowest -> low (each QOS's Preempt names the next)")
    assert msgs[1].startswith('SlurmAccounting "tenancy-accounting" (QOS selfish on storage) preempts itself '
                              "(its Preempt names selfish): preemption must run one way")


def test_a_team_preempting_the_opportunistic_qos_only_passes():
    # a chain is fine: vision over a team-less tier over scavenger (nobody preempts vision)
    objs = edited(vision={"Preempt": "tier,scavenger"}) + [{"kind": "qos", "name": "tier",
                                                             "fields": {"Preempt": "scavenger"}}]
    assert check(tenancy.validate_preemption_graph, objs) == []


# ---- 4. the guarantees fit the fleet --------------------------------------------------------------

def test_guarantees_beyond_the_fleet_are_refused():
    objs = edited(infra={"GrpTRES": "gres/gpu=40,gres/gpu:v100=40"})
    msgs = check(tenancy.validate_guarantees_fit, objs)
    head = 'SlurmAccounting "tenancy-accounting" (on storage): the teams\' GrpTRES '
    tail = ("), more than the 112 GPUs of the nodes in the stack's partitions (gpu-fleet:nodes, "
            "gpu-fleet:slurm.partitions): a team would wait for GPUs it was guaranteed; lower the guarantees "
            "(gpu-fleet:tenancy.teams[].guaranteed) or add nodes.")
    assert msgs == [
        head + "gres/gpu guarantees add up to 120 (QOS infra 40, QOS speech 32, QOS vision 48" + tail,
        head + "gres/gpu:v100 guarantees add up to 120 (QOS infra 40, QOS speech 32, QOS vision 48"
        + tail.replace("112 GPUs", "112 v100 GPUs")]


def test_a_type_no_partition_node_has_is_refused():
    msgs = check(tenancy.validate_guarantees_fit, edited(infra={"GrpTRES": "gres/gpu=8,gres/gpu:a100=8"}))
    assert len(msgs) == 1 and "GrpTRES gres/gpu:a100 guarantees add up to 8 (QOS infra 8), more than the 0 a100 " \
        "GPUs" in msgs[0], msgs


def test_nodes_outside_every_partition_do_not_count():
    raw = tenancy_raw()
    part = raw["gpu-fleet:slurm"]["partitions"][0]
    part["nodes"] = part["nodes"][:10]  # 80 V100 left in the partitions: 88 guaranteed
    stackconfig.configure(raw)
    msgs = check(tenancy.validate_guarantees_fit)
    assert len(msgs) == 2 and all("add up to 88" in m and "more than the 80 " in m for m in msgs), msgs


def test_a_nodes_file_is_read(tmp_path):
    import yaml

    raw = tenancy_raw()
    nodes = raw.pop("gpu-fleet:nodes")
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"nodes": nodes}))
    raw["gpu-fleet:nodes_file"] = str(tmp_path / "nodes.yaml")
    stackconfig.configure(raw)
    assert check(tenancy.validate_guarantees_fit) == []
    raw["gpu-fleet:nodes_file"] = str(tmp_path / "missing.yaml")
    stackconfig.configure(raw)
    msgs = check(tenancy.validate_guarantees_fit)
    assert len(msgs) == 1 and f"gpu-fleet:nodes_file {tmp_path}/missing.yaml cannot be read" in msgs[0], msgs


def test_without_the_stack_config_guarantees_are_refused():
    stackconfig.configure(None)
    assert check(tenancy.validate_guarantees_fit) == [
        'SlurmAccounting "tenancy-accounting" (on storage) guarantees teams GPUs (gres/gpu: infra 8, speech 32, '
        "vision 48; gres/gpu:v100: infra 8, speech 32, vision 48), which cannot be checked against the stack's "
        "nodes: the engine did not send the stack's configuration; refused until they can be."]
    # no team, nothing to check
    ops, _ = split(OBJECTS)
    assert check(tenancy.validate_guarantees_fit, ops) == []
