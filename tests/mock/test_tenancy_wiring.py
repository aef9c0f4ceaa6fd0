"""The tenancy layer's wiring: the ops account after slurmdbd serves (the cluster registered)
and before slurmctld starts (associations are enforced: the canary's job needs its own), the
teams' objects once slurmctld registered the TRES their limits name; the Slurm layer renders
the layer's section; without tenancy nothing of it exists."""

from __future__ import annotations

import pulumi

from .wiring import RAW, build, settled

TENANCY = {"enabled": True, "teams": [{"name": "vision", "guaranteed": {"v100": 16}, "members": ["alice"]}],
           "opportunistic": {"max_gpus_per_team": 8, "grace_s": 30}}


@pulumi.runtime.test
def test_the_objects_exist_before_slurmctld_and_after_the_cluster_is_registered(graph):
    fleet = build({**RAW, "gpu-fleet:tenancy": TENANCY})
    assert fleet.tenancy is not None

    def check(_):
        conf = graph.inputs["storage-slurm.conf"]["content"]
        # the ops account before slurmctld; the teams' objects (their TRES limits) after it
        assert graph.before("cluster-id", "tenancy-ops")
        assert "tenancy-ops" in graph.deps["storage-slurmctld"]
        assert graph.before("slurm-reconfigure", "tenancy-accounting")
        assert graph.before("tenancy-accounting", "fleet-acceptance")
        assert [(m["kind"], m["name"]) for m in graph.inputs["tenancy-ops"]["members"]] == [
            ("account", "gpu-fleet-ops"), ("user", "fleetcanary")]
        assert "AccountingStorageEnforce=associations,limits,qos" in conf and "PreemptType=preempt/qos" in conf
        members = graph.inputs["tenancy-accounting"]["members"]
        assert [(m["kind"], m["name"]) for m in members] == [
            ("qos", "opportunistic"), ("qos", "vision"), ("account", "vision"), ("user", "alice")]

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_without_tenancy_nothing_of_it_is_declared_or_rendered(graph):
    fleet = build(RAW)
    assert fleet.tenancy is None

    def check(_):
        conf = graph.inputs["storage-slurm.conf"]["content"]
        assert "tenancy-accounting" not in graph.inputs and "tenancy-ops" not in graph.inputs
        assert "PreemptType" not in conf and "AccountingStorageEnforce" not in conf

    return settled(fleet).apply(check)
