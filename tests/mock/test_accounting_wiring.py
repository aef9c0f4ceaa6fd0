"""The accounting layer's wiring: slurmctld waits on accounting's ready, which builds on the controller base; without accounting it waits on nothing of it."""

from __future__ import annotations

import pulumi

from .wiring import RAW, build, settled


@pulumi.runtime.test
def test_accounting_is_ready_before_slurmctld_and_builds_on_the_controller_base(graph):
    fleet = build(RAW)

    def check(_):
        assert "cluster-id" in graph.deps["storage-slurmctld"]
        for step in ("slurmdbd-serving", "dbd-reachability", "cluster-registration"):
            assert graph.before(step, "storage-slurmctld"), step
        assert graph.before("storage-slurm-packages", "restd-account")
        assert graph.before("storage-munge", "restd-account")
        # slurmrestd and the verification come after slurmctld, the final acceptance after both
        assert graph.before("storage-slurmctld", "slurmrestd")
        assert graph.before("accounting-check", "fleet-acceptance")

    return settled(fleet).apply(check)

@pulumi.runtime.test
def test_without_accounting_slurmctld_waits_on_nothing_of_it(graph):
    raw = {**RAW, "gpu-fleet:accounting": {"enabled": False}}
    fleet = build(raw)
    assert fleet.accounting is None

    def check(_):
        assert not any(n.startswith(("slurmdbd", "cluster-id", "accounting")) for n in graph.inputs)
        assert graph.deps["storage-slurmctld"] >= {"storage-munge", "storage-slurm.conf"}

    return pulumi.Output.all(fleet.acceptance.fleet.urn).apply(check)
