"""The guards' wiring: each guard after every slurmd; the partitions open on guarded nodes only."""

from __future__ import annotations

import pulumi

from .wiring import RAW, build, settled


@pulumi.runtime.test
def test_guards_start_after_every_slurmd_and_the_partitions_open_only_on_guarded_nodes(graph):
    fleet = build({**RAW, "gpu-fleet:guards": {"enabled": True}})

    def check(_):
        assert graph.chain["guards"] == "gpu-fleet:index:Fleet$gpu-fleet:guards:Guards"
        for n in ("gpu01", "gpu02", "gpu03"):
            assert graph.chain[f"{n}-guard-check"].startswith("gpu-fleet:guards:Guards$")
            for slurmd in ("gpu01-slurmd", "gpu02-slurmd", "gpu03-slurmd", "slurm-reconfigure"):
                assert graph.before(slurmd, f"{n}-guard"), (slurmd, n)
            assert graph.before(f"{n}-guard-unit", f"{n}-guard-check")
            assert graph.before(f"{n}-guard-check", "fleet-acceptance"), n
            assert not graph.before(f"{n}-guard-check", "canary-first"), n  # the gate does not wait on them

    return settled(fleet).apply(check)
