"""components/migrate.py's state transform on hand-made states (the real engine's run of it:
tests/integration/test_migrate.py)."""

from __future__ import annotations

import pytest

from components.migrate import Refused, migrate

P = "urn:pulumi:lab::gpu-fleet::gpu-fleet:index:Fleet$gpu-fleet:slurm:SlurmCluster"
SLURM = "urn:pulumi:lab::gpu-fleet::gpu-fleet:index:Fleet$gpu-fleet:slurm:SlurmCluster::slurm"
PROV = "urn:pulumi:lab::gpu-fleet::pulumi:providers:pulumi-python::default::1234"


def urn(kind: str, name: str) -> str:
    return f"{P}$pulumi-python:dynamic/host:{kind}::{name}"


def account(host: str, who: str, user: str, uid: int, created: bool, deps=()) -> dict:
    ins = {"__provider": "x", "conn": {"name": host, "address": "10.0.0.1"}, "name": user, "uid": uid,
           "gid": uid, "home": "/nonexistent", "shell": "/usr/sbin/nologin"}
    return {"urn": urn("Account", f"{host}-{who}-account"), "custom": True, "id": f"{host}:account:{user}",
            "type": "pulumi-python:dynamic/host:Account", "inputs": ins,
            "outputs": {**ins, "created_user": created, "created_group": created, "_inputs": {"uid": uid}},
            "parent": SLURM, "provider": PROV, "dependencies": list(deps),
            "propertyDependencies": {"conn": [], "name": []}, "created": "2026-01-02", "modified": "2026-01-03"}


def state(*resources: dict, pending=None) -> dict:
    top = [{"urn": "urn:pulumi:lab::gpu-fleet::pulumi:pulumi:Stack::gpu-fleet-lab", "custom": False,
            "type": "pulumi:pulumi:Stack"},
           {"urn": PROV.rsplit("::", 1)[0], "custom": True, "id": "1234", "type": "pulumi:providers:pulumi-python"},
           {"urn": SLURM, "custom": False, "type": "gpu-fleet:slurm:SlurmCluster"}]
    dep = {"manifest": {}, "resources": [*top, *resources]}
    if pending:
        dep["pending_operations"] = pending
    return {"version": 3, "deployment": dep}


def packages(host: str, deps: list[str]) -> dict:
    return {"urn": urn("PackageSet", f"{host}-slurm-packages"), "custom": True, "type": "pulumi-python:dynamic/host:PackageSet",
            "inputs": {"conn": {"name": host, "address": "10.0.0.1"}}, "outputs": {}, "parent": SLURM,
            "provider": PROV, "dependencies": deps, "propertyDependencies": {"conn": deps}}


def test_a_hosts_three_accounts_become_one_bundle_with_their_records_and_dependents():
    old = [account("node1", "munge", "munge", 440, False), account("node1", "slurm", "slurm", 64030, True),
           account("node1", "canary", "fleetcanary", 64200, True)]
    pk = packages("node1", [r["urn"] for r in old])
    new, made = migrate(state(pk, *old))  # the dependent first: the result is put in order
    [(b_urn, replaced)] = made
    assert b_urn == f"{P}$pulumi-python:dynamic/host:Accounts::node1-accounts"
    assert replaced == [r["urn"] for r in old]
    res = new["deployment"]["resources"]
    names = [r["urn"].rsplit("::", 1)[1] for r in res]
    assert names.index("node1-accounts") < names.index("node1-slurm-packages")
    assert not any(n.endswith("-account") for n in names)
    b = next(r for r in res if r["urn"] == b_urn)
    assert b["id"] == "node1:node1-accounts" and b["parent"] == SLURM and b["provider"] == PROV
    assert [m["name"] for m in b["inputs"]["members"]] == ["munge", "slurm", "fleetcanary"]
    assert b["outputs"]["records"] == {
        "account:munge": {"created_user": False, "created_group": False},
        "account:slurm": {"created_user": True, "created_group": True},
        "account:fleetcanary": {"created_user": True, "created_group": True}}
    assert b["outputs"]["state"]["account:slurm"] == {"uid": 64030, "gid": 64030, "home": "/nonexistent",
                                                      "shell": "/usr/sbin/nologin"}
    assert (b["created"], b["modified"]) == ("2026-01-02", "2026-01-03")
    p = next(r for r in res if r["urn"].endswith("::node1-slurm-packages"))
    assert p["dependencies"] == [b_urn] and p["propertyDependencies"] == {"conn": [b_urn]}
    assert migrate(new) == (new, [])  # once is enough


def test_each_host_gets_its_own_bundle_and_others_stay():
    other = {"urn": urn("Account", "restd-account"), "custom": True, "type": "pulumi-python:dynamic/host:Account",
             "inputs": {"conn": {"name": "ctl"}, "name": "slurmrestd"}, "outputs": {}, "parent": SLURM}
    new, made = migrate(state(account("a", "munge", "munge", 1, True), account("b", "munge", "munge", 1, True),
                              other))
    assert sorted(u.rsplit("::", 1)[1] for u, _ in made) == ["a-accounts", "b-accounts"]
    assert other in new["deployment"]["resources"]


def test_refused_with_pending_operations_or_a_secret():
    s = state(account("a", "munge", "munge", 1, True),
              pending=[{"type": "creating", "resource": {"urn": urn("Account", "a-slurm-account")}}])
    with pytest.raises(Refused, match="interrupted run left pending .*creating"):
        migrate(s)
    secret = account("a", "munge", "munge", 1, True)
    secret["inputs"]["home"] = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
                                "ciphertext": "v1:..."}
    with pytest.raises(Refused, match="holds a secret"):
        migrate(state(secret))
