"""The K3s retirement layer's config rules and its pure parts (bundle layout, exports, audit and
stop verdicts, batches, Ready, the PostgreSQL proof)."""

from __future__ import annotations

import calendar
import time

import pytest

from components.admission import decide
from components.config.load import parse_fleet_config
from components.errors import ConfigError
from components.layers.k3s_retirement.bundle import (
    MARKER, Layout, batches, count_problems, export_objects, host_paths_of, judge_audit, node_ready,
    parse_audit, parse_steps, parse_stopped, steps_for, stopped_problems, strip_object,
)

SRC = "stacks/Pulumi.full.yaml"


def problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(raw, SRC)
    return exc.value.problems


# ---- config ------------------------------------------------------------------------------------

def test_enabled_needs_a_change_id_a_server_and_nodes(full_config):
    full_config["gpu-fleet:k3s_retirement"] = {"enabled": True}
    assert problems(full_config)[-3:] == [
        "gpu-fleet:k3s_retirement.change_id: required when the layer is enabled",
        "gpu-fleet:k3s_retirement.server: required when the layer is enabled",
        "gpu-fleet:k3s_retirement.retire: required when the layer is enabled: the K3s nodes to retire"]


@pytest.mark.parametrize("bad", ["K3S", "-x", "a b", "x" * 65, "a\nb"])
def test_a_change_id_is_checked(full_config, bad):
    full_config["gpu-fleet:k3s_retirement"]["change_id"] = bad
    [p] = problems(full_config)
    assert p.startswith("gpu-fleet:k3s_retirement.change_id: "), p


def test_only_k3s_nodes_are_retired_and_the_server_is_one(full_config):
    k = full_config["gpu-fleet:k3s_retirement"]
    k["server"] = "gpu01"
    k["retire"] = [*k["retire"], "gpu02", "gpu99", "gpu04"]
    got = problems(full_config)
    assert "gpu-fleet:k3s_retirement.server: node 'gpu01' is owned by slurm, not k3s" in got
    assert "gpu-fleet:k3s_retirement.retire[12]: node 'gpu02' is owned by free; only a k3s-owned node is retired" in got
    assert "gpu-fleet:k3s_retirement.retire[13]: unknown node 'gpu99'" in got
    assert "gpu-fleet:k3s_retirement.retire[14]: node 'gpu04' listed twice" in got


def test_retiring_the_server_without_an_agent_is_refused(full_config):
    """An agent left running without its server would be a broken K3s node."""
    full_config["gpu-fleet:k3s_retirement"]["retire"].remove("gpu09")
    full_config["gpu-fleet:slurm"]["partitions"][0]["nodes"].remove("gpu09")
    [p] = problems(full_config)
    assert p.startswith("gpu-fleet:k3s_retirement.retire: retiring the server 'gpu03' would leave the K3s "
                        "agents gpu09 without it"), p


def test_agents_alone_may_be_retired_and_a_k3s_node_not_retired_stays_out(full_config):
    k = full_config["gpu-fleet:k3s_retirement"]
    k["retire"] = ["gpu04", "gpu05"]
    got = problems(full_config)
    # every K3s node still in the partition but not retired is named
    assert len(got) == 10 and all("is owned by k3s" in p for p in got), got
    full_config["gpu-fleet:slurm"]["partitions"][0]["nodes"] = ["gpu01", "gpu02", "gpu04", "gpu05"]
    cfg = parse_fleet_config(full_config, SRC)
    assert [n.name for n in cfg.slurm_nodes()] == ["gpu01", "gpu02", "gpu04", "gpu05"]


def test_disabled_layer_does_not_hand_over(full_config):
    full_config["gpu-fleet:k3s_retirement"]["enabled"] = False
    assert len(problems(full_config)) == 12


def test_batch_size_at_least_one(full_config):
    full_config["gpu-fleet:k3s_retirement"]["batch_size"] = 0
    [p] = problems(full_config)
    assert p.startswith("gpu-fleet:k3s_retirement.batch_size: "), p


def test_admission_passes_a_k3s_node_only_through_the_retirement_gate(full_config):
    cfg = parse_fleet_config(full_config, SRC)
    nodes = cfg.slurm_nodes()
    gate = (frozenset(cfg.k3s_retirement.retire), ["gpu03", "gpu04"], {})
    admitted, refused = decide(nodes, {"k3s_retirement": gate})
    assert admitted == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert refused["gpu05"] == "k3s_retirement: no verdict for this node"
    admitted, refused = decide(nodes, {})
    assert admitted == ["gpu01", "gpu02"] and refused["gpu03"].startswith("k3s: K3s still runs this node")


# ---- pure parts ---------------------------------------------------------------------------------

def test_layout_and_steps():
    lay = Layout("/srv/b", "c1")
    assert lay.item("gpu03", "datastore/state.db") == "/srv/b/c1/gpu03/items/datastore/state.db"
    assert lay.marker("gpu03", "api") == "/srv/b/c1/gpu03/steps/api.done"
    assert steps_for(True) == ("baseline", "datastore", "token", "api", "hostpath", "config", "postgres")
    assert steps_for(False) == ("baseline", "hostpath", "config", "postgres")


def test_batches_in_order_and_server_not_among_them():
    assert batches(["a", "b", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert batches(["a"], 4) == [["a"]]
    assert batches([], 4) == []


DEPLOY = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "workloads", "uid": "u1", "resourceVersion": "9",
                 "generation": 2, "creationTimestamp": "t", "managedFields": [{}],
                 "annotations": {"deployment.kubernetes.io/revision": "1", "team": "ml"}},
    "spec": {"template": {"spec": {"volumes": [{"name": "d", "hostPath": {"path": "/srv/k3s-data/web"}},
                                               {"name": "e", "emptyDir": {}}]}}},
    "status": {"replicas": 1},
}


def test_strip_keeps_intent_and_drops_what_the_server_sets():
    o = strip_object(DEPLOY)
    assert "status" not in o
    assert o["metadata"] == {"name": "web", "namespace": "workloads", "annotations": {"team": "ml"}}
    svc = strip_object({"kind": "Service", "metadata": {"name": "s", "namespace": "w"},
                        "spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ports": [{"port": 80}]}})
    assert svc["spec"] == {"ports": [{"port": 80}]}


def test_export_adds_namespaces_skips_system_ones_and_finds_host_paths():
    sys_cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "kube-system"}}
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "n", "namespace": "batch"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"volumes": [
                {"hostPath": {"path": "/var/lib/nightly"}}]}}}}}}
    objs = export_objects({"items": [DEPLOY, sys_cm, cron]}, ["kube-system"])
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("Namespace", "batch"), ("Namespace", "workloads"), ("CronJob", "n"), ("Deployment", "web")]
    assert host_paths_of(objs) == ["/srv/k3s-data/web", "/var/lib/nightly"]


AUDIT = """== cpus
80
== lscpu
Socket(s):  2
Core(s) per socket: 20
Thread(s) per core: 2
== mem_kib
196000000
== gpu_devices
/dev/nvidia0
/dev/nvidia1
== nvidia_smi
0, GPU-aaa, Tesla V100-SXM2-16GB, 580.173.02
1, GPU-bbb, Tesla V100-SXM2-16GB, 580.173.02
== gpu_holders
4242 containerd-shim /dev/nvidia0
== services
k3s-agent.service enabled active
slurmd.service  inactive
== postgres
running
== mounts
== ntp
yes
== cgroup
cgroup2fs
== root_free_mib
51200
== slurmd_c
NodeName=gpu04 CPUs=80
"""


def test_audit_facts_and_who_holds_each_gpu():
    f = parse_audit(AUDIT)
    assert (f["cpus"], f["memory_mib"], len(f["gpu_devices"]), f["postgres"]) == (80, 191406, 2, True)
    assert f["topology"]["sockets"] == "2" and f["gpus"][1]["uuid"] == "GPU-bbb"
    assert f["gpu_holders"] == [{"pid": 4242, "comm": "containerd-shim", "device": "/dev/nvidia0"}]
    assert f["services"]["k3s-agent.service"] == {"enabled": "enabled", "active": "active"}
    assert f["cgroup"] == "cgroup2fs" and f["slurmd_c"].startswith("NodeName=gpu04")


def test_audit_names_both_values_where_the_spec_differs():
    f = parse_audit(AUDIT)
    assert judge_audit("gpu04", {"cpus": 80, "real_memory_mib": 184000, "gpus": 2}, f) == []
    got = judge_audit("gpu04", {"cpus": 96, "real_memory_mib": 200000, "gpus": 8}, f)
    assert got == ["node gpu04: 80 CPUs online, the stack declares cpus: 96",
                   "node gpu04: 191406 MiB of memory, less than the stack's real_memory_mib: 200000",
                   "node gpu04: 2 GPU devices, the stack declares gpus.count: 8",
                   "node gpu04: nvidia-smi lists 2 GPUs, the stack declares 8"]


def test_stopped_verdict():
    out = ("== units\nk3s-agent.service disabled inactive yes\n== marker\nc1\n== k3s_procs\n"
           "== gpu_holders\n== mounts\n")
    assert stopped_problems(parse_stopped(out), "c1") == []
    bad = out.replace("disabled inactive yes", "enabled active no").replace(
        "== k3s_procs\n", "== k3s_procs\n77 containerd-shim-runc-v2\n").replace(
        "== mounts\n", "== mounts\n/var/lib/kubelet/pods/x tmpfs\n")
    got = stopped_problems(parse_stopped(bad), "c2")
    assert got == ["k3s-agent.service is enabled", "k3s-agent.service is active",
                   f"k3s-agent.service has no drop-in condition on {MARKER}",
                   f"{MARKER} holds 'c1', not the change 'c2'", "K3s process left: 77 containerd-shim-runc-v2",
                   "still mounted: /var/lib/kubelet/pods/x tmpfs"]


def _nodes(beat: str, status: str = "True") -> dict:
    return {"items": [{"metadata": {"name": "n1"}, "status": {"conditions": [
        {"type": "Ready", "status": status, "lastHeartbeatTime": beat}]}}]}


def test_ready_needs_a_fresh_heartbeat():
    now = calendar.timegm(time.strptime("2026-12-01T10:00:30Z", "%Y-%m-%dT%H:%M:%SZ"))
    assert node_ready(_nodes("2026-12-01T10:00:20Z"), "n1", 40, now) == (True, "Ready, heartbeat 10 s ago")
    assert node_ready(_nodes("2026-12-01T09:59:00Z"), "n1", 40, now)[1] == "Ready, but the last heartbeat is 90 s old"
    assert node_ready(_nodes("2026-12-01T10:00:20Z", "False"), "n1", 40, now) == (False, "Ready is False")
    assert node_ready(_nodes("2026-12-01T10:00:20Z"), "n2", 40, now) == (False, "no Node object")


def test_postgres_proof_names_each_difference():
    want = {"public.a": 3, "public.b": 0}
    assert count_problems("app", want, dict(want), "restored") == []
    assert count_problems("app", want, {"public.a": 2}, "restored") == [
        "app: 1 user tables restored, the proof has 2", "app.public.a: 2 rows restored, the proof has 3",
        "app.public.b: None rows restored, the proof has 0"]


def test_bundle_state_markers():
    out = ('== baseline\n{"at": "t0"}\n== steps\nbaseline {"items": {}}\ndatastore {"items": {"d": 1}}\n'
           "== manifest\n== seal\n")
    base, steps, seal = parse_steps(out)
    assert base == {"at": "t0"} and sorted(steps) == ["baseline", "datastore"] and seal is None


def test_a_new_change_id_on_retired_nodes_is_refused_in_preview():
    """Changing change_id while a node is retired would restore and retire again in one run:
    refused in diff (preview), naming the way: roll back first."""
    from components.layers.k3s_retirement.retire import K3sStopProvider
    from components.errors import FleetError

    conn = {"name": "gpu04", "address": "192.0.2.24", "port": 22, "user": "root"}
    olds = {"conn": conn, "change_id": "c1", "stopped": True}
    with pytest.raises(FleetError) as exc:
        K3sStopProvider().diff("gpu04:k3s-stop:c1", olds, {**olds, "change_id": "c2"})
    assert "retired under change 'c1'" in str(exc.value) and "take gpu04 out of" in str(exc.value)
    same = K3sStopProvider().diff("gpu04:k3s-stop:c1", olds, dict(olds))
    assert same.changes is False
    drifted = K3sStopProvider().diff("gpu04:k3s-stop:c1", {**olds, "stopped": False}, dict(olds))
    assert drifted.changes is True  # a refresh that found K3s running again: the next up stops it
