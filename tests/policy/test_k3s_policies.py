"""The K3s retirement policies, called directly: `k3s-postgres-restore-proof` on a Stop's
inputs, `k3s-batches-server-last` on the layer's resource graph (built as the engine lists
it, tests/policy/fakes.py), each with a compliant and a violating case, and values unknown
during preview skipped."""

from __future__ import annotations

import pytest

from gpu_fleet_policies import k3s, stackconfig
from gpu_fleet_policies.pack import DESCRIPTIONS, KINDS, VALIDATORS

from .fakes import (
    K3S_STOP, UNKNOWN_BOOL, UNKNOWN_OBJ, k3s_retirement, resource_args, stack_args, violations,
)


@pytest.fixture(autouse=True)
def _clean_state():
    stackconfig.configure(None)
    yield
    stackconfig.configure(None)


def test_the_pack_declares_the_k3s_policies():
    assert VALIDATORS["k3s-postgres-restore-proof"] is k3s.validate_postgres_proof
    assert VALIDATORS["k3s-batches-server-last"] is k3s.validate_stop_order
    assert KINDS["k3s-postgres-restore-proof"] == "resource"  # before each stop, on real values
    assert KINDS["k3s-batches-server-last"] == "stack"
    assert "unknown during a first preview" in DESCRIPTIONS["k3s-postgres-restore-proof"]


# ---- no retirement without a PostgreSQL restore proof ---------------------------------------

COUNTS = {"public.t01": 3.0, "public.t02": 0.0}
PROOF = {"db": "app", "tables": 2.0, "rows": 3.0, "source": COUNTS, "restored": dict(COUNTS),
         "at": "2026-12-01T00:00:00Z"}


def stop(audit, proofs, role="agent", name="gpu05-k3s-stop"):
    return resource_args(K3S_STOP, {"conn": {"name": "gpu05", "address": "192.0.2.25"}, "role": role,
                                    "change_id": "k3s-retire-1", "audit": audit, "proofs": proofs,
                                    "sealed": True}, name)


NO_PROOF = ('K3s Stop "gpu05-k3s-stop" (agent on gpu05) stops K3s on a node whose audit found PostgreSQL '
            "running, without a PostgreSQL restore proof; pass the node's preserve proofs (each database "
            "dumped, restored into a scratch database and compared, tables and rows) to the stop before "
            "K3s is stopped.")


def test_postgres_proof_present_passes():
    v = k3s.validate_postgres_proof
    assert violations(v, stop({"postgres": True}, {"app": PROOF})) == []
    # no PostgreSQL on the node: nothing to prove
    assert violations(v, stop({"postgres": False}, {})) == []
    assert violations(v, stop({"postgres": False}, None)) == []


@pytest.mark.parametrize("proofs", [{}, None])
def test_postgres_running_without_a_proof_is_refused(proofs):
    assert violations(k3s.validate_postgres_proof, stop({"postgres": True}, proofs)) == [NO_PROOF]


def test_a_proof_whose_restore_differs_is_refused():
    bad = {**PROOF, "restored": {"public.t01": 2.0, "public.t02": 0.0}}
    missing = {k: v for k, v in PROOF.items() if k != "restored"}
    msgs = violations(k3s.validate_postgres_proof, stop({"postgres": True}, {"app": bad, "ops": missing,
                                                                             "ok": PROOF}))
    assert msgs == [
        f'K3s Stop "gpu05-k3s-stop" (agent on gpu05) has no valid restore proof for PostgreSQL database '
        f'"{db}": the scratch restore does not show the source\'s user tables and row counts; pass a '
        "proof whose restored counts equal the source's (preserve the database again) before K3s is stopped."
        for db in ("app", "ops")]


def test_postgres_proof_unknown_during_preview_is_skipped():
    v = k3s.validate_postgres_proof
    assert violations(v, stop(UNKNOWN_OBJ, UNKNOWN_OBJ)) == []       # a first preview
    assert violations(v, stop({"postgres": True}, UNKNOWN_OBJ)) == []  # the preserve has not run
    assert violations(v, stop({"postgres": UNKNOWN_BOOL}, {})) == []
    assert violations(v, resource_args(K3S_STOP, {}, "empty")) == []
    # other types are not this policy's
    assert violations(v, resource_args("pulumi-python:dynamic/k3s:Preserve",
                                       {"audit": {"postgres": True}, "proofs": {}})) == []


# ---- batches >= 1, the server last ------------------------------------------------------------

NODES = [f"gpu{i:02d}" for i in range(3, 15)]  # the full stack: server gpu03, 11 agents


def order(res, config=None):
    stackconfig.configure(config)
    return violations(k3s.validate_stop_order, stack_args(*res.values()))


@pytest.mark.parametrize("size", [1, 4, 11, 20])
def test_the_layers_order_passes(size):
    res = k3s_retirement(NODES, "gpu03", batch_size=size)
    assert order(res, {"gpu-fleet:k3s_retirement": {"enabled": True, "batch_size": size}}) == []
    assert order(res) == []  # no stack config: the graph alone
    # agents only (the server not retired by this stack)
    assert order(k3s_retirement(NODES[1:], None, batch_size=size)) == []


def test_a_server_that_does_not_wait_on_every_agent_is_refused():
    res = k3s_retirement(NODES, "gpu03", batch_size=4)
    srv = res["gpu03-k3s-stop"]
    for n in ("gpu13", "gpu14"):  # the last batch
        srv.dependencies.remove(res[f"{n}-k3s-stop"])
    assert order(res) == [
        'K3s Stop "gpu03-k3s-stop" (server on gpu03) does not wait on the agent Stops gpu13-k3s-stop, '
        "gpu14-k3s-stop of change k3s-retire-1: the server stops last, after every agent batch; make it "
        "depend on them."]
    # waiting on the last batch only is enough: it waits on the earlier ones through it
    res = k3s_retirement(NODES, "gpu03", batch_size=4)
    srv = res["gpu03-k3s-stop"]
    srv.dependencies[:] = [d for d in srv.dependencies if d.name not in
                           {f"{n}-k3s-stop" for n in NODES[1:9]}]
    assert order(res) == []


@pytest.mark.parametrize("stop, dep, message", [
    ("gpu05-k3s-stop", "k3s-seal",  # an agent of the first batch that skips the seal
     'K3s Stop "gpu05-k3s-stop" (agent on gpu05) does not wait on the K3s Seal of change k3s-retire-1, '
     "so it is in no batch chain and could stop K3s before the bundle is sealed; make it depend on the "
     "seal (and on the previous batch's stops)."),
    ("gpu09-k3s-stop", "gpu05-k3s-stop",  # a second-batch stop that skips one of the first batch
     'K3s Stop "gpu09-k3s-stop" (agent on gpu09) of change k3s-retire-1 does not wait on the previous '
     "batch's stops gpu05-k3s-stop; make every stop of a batch depend on every stop of the batch "
     "before it."),
])
def test_an_agent_out_of_the_chain_is_refused(stop, dep, message):
    res = k3s_retirement(NODES, "gpu03", batch_size=4)
    res[stop].dependencies.remove(res[dep])
    assert order(res) == [message]


def test_a_batch_larger_than_batch_size_is_refused():
    res = k3s_retirement(NODES, "gpu03", batch_size=11)  # every agent at once
    msgs = order(res, {"gpu-fleet:k3s_retirement": '{"enabled": true, "batch_size": 4}'})
    assert msgs == [
        "K3s change k3s-retire-1 stops 11 agents at once (" + ", ".join(f"{n}-k3s-stop" for n in NODES[1:])
        + "), more than gpu-fleet:k3s_retirement.batch_size (4); make each batch's stops depend on the "
        "previous batch's."]


@pytest.mark.parametrize("size", [0, -1, "four", 1.5])
def test_batch_size_below_one_is_refused(size):
    res = k3s_retirement(NODES, "gpu03", batch_size=4)
    assert order(res, {"gpu-fleet:k3s_retirement": {"enabled": True, "batch_size": size}}) == [
        f"gpu-fleet:k3s_retirement.batch_size is {size!r}: K3s agents are stopped in batches of at least "
        "one node; set batch_size to 1 or more."]


def test_two_server_stops_in_one_change_are_refused():
    res = k3s_retirement(NODES, "gpu03", batch_size=4,
                         stop_props={"gpu14": {"role": "server"}})
    msgs = order(res)
    assert msgs[0].startswith("K3s change k3s-retire-1 stops the server role more than once ("), msgs
    assert '"gpu14-k3s-stop"' in msgs[0] and '"gpu03-k3s-stop"' in msgs[0], msgs


def test_stop_order_skips_what_is_unknown():
    res = k3s_retirement(NODES, "gpu03", batch_size=4,
                         stop_props={"gpu04": {"role": UNKNOWN_OBJ}})  # role not known yet
    assert order(res) == []
    assert order({}) == []  # no retirement in the stack
