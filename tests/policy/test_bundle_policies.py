"""Bundles (components/providers/bundle.py) under the pack: each member is validated as the File
or Account it would be on its own (`common.each_member`, applied to every policy the pack
serves), so a node's slurm.conf in a bundle is checked as a node's File was."""

from __future__ import annotations

from components.layers.slurm.render import render_cgroup_conf
from components.providers.stored import store_text
from gpu_fleet_policies import identities, slurm
from gpu_fleet_policies.common import each_member
from gpu_fleet_policies.pack import KINDS, VALIDATORS, policies
from gpu_fleet_policies.props import ACCOUNTS, FILES

from .fakes import CONN, UNKNOWN_OBJ, policy_resource, resource_args, stack_args, violations
from .test_validators import CANARY_SLURM, cfg

CGROUP = render_cgroup_conf(cfg("canary").slurm)


def by_hash(path: str, text: str) -> dict:
    source, sha = store_text(text)
    return {"path": path, "source": source, "source_sha256": sha, "mode": "0644", "owner": "root",
            "group": "root", "secret": False}


def files_bundle(*members: dict, name: str = "gpu01-slurm-config"):
    return resource_args(FILES, {"conn": CONN, "bundle": name, "members": list(members)}, name)


def test_a_bad_member_is_reported_as_that_file_and_a_good_bundle_passes():
    confine = each_member(slurm.validate_cgroup_confinement, "resource")
    good = files_bundle(by_hash("/etc/slurm/slurm.conf", CANARY_SLURM), by_hash("/etc/slurm/cgroup.conf", CGROUP))
    assert violations(confine, good) == []
    bad = files_bundle(by_hash("/etc/slurm/slurm.conf", CANARY_SLURM),
                       by_hash("/etc/slurm/cgroup.conf", CGROUP.replace("ConstrainCores=yes", "ConstrainCores=no")))
    [m] = violations(confine, bad)
    assert m.startswith('File "gpu01-slurm-config /etc/slurm/cgroup.conf" (/etc/slurm/cgroup.conf on gpu01) '
                        "does not confine jobs: set ConstrainCores=yes"), m
    # the validator alone does not look inside a bundle: the wrapper is what checks members
    assert violations(slurm.validate_cgroup_confinement, bad) == []


def test_every_policy_the_pack_serves_looks_inside_bundles():
    bad = files_bundle(by_hash("/etc/slurm/cgroup.conf", CGROUP.replace("ConstrainCores=yes", "ConstrainCores=no")))
    served = {p.name: getattr(p, f"_{type(p).__name__}__validate") for p in policies()}
    assert set(served) == set(VALIDATORS)
    for name in ("slurm-cgroup-confinement",):
        assert violations(served[name], bad), name
    for name, fn in served.items():  # each one wrapped, resource and stack policies alike
        assert fn.__wrapped__ is VALIDATORS[name] and KINDS[name] in ("resource", "stack")


def test_members_not_computed_yet_are_checked_later():
    args = resource_args(FILES, {"conn": CONN, "bundle": "b", "members": UNKNOWN_OBJ}, "b")
    assert violations(each_member(slurm.validate_cgroup_confinement, "resource"), args) == []


def accounts(host: str, slurm_uid: float) -> object:
    members = [{"name": "munge", "uid": 64031.0, "gid": 64031.0, "home": "/nonexistent", "shell": "/usr/sbin/nologin"},
               {"name": "slurm", "uid": slurm_uid, "gid": 64030.0, "home": "/nonexistent", "shell": "/usr/sbin/nologin"}]
    return policy_resource(ACCOUNTS, {"conn": {"name": host, "address": "192.0.2.1"}, "bundle": f"{host}-accounts",
                                      "members": members}, f"{host}-accounts")


def test_service_ids_are_compared_across_hosts_bundles():
    ids = each_member(identities.validate_service_ids, "stack")
    assert violations(ids, stack_args(accounts("storage", 64030.0), accounts("gpu01", 64030.0))) == []
    msgs = violations(ids, stack_args(accounts("storage", 64030.0), accounts("gpu01", 64030.0),
                                      accounts("gpu02", 64099.0)))
    assert msgs == ['Account "gpu02-accounts slurm" gives slurm uid 64099 on gpu02, but gpu01 and storage give '
                    "it uid 64030; set the same uid on every host (gpu-fleet:slurm.slurm_uid)."]
