"""The fleet's shape under mocks: every layer a direct child of the fleet, no layer's resource under another's."""

from __future__ import annotations

import pulumi

from .wiring import RAW, build, settled


@pulumi.runtime.test
def test_each_layer_is_a_direct_child_of_the_fleet(graph):
    fleet = build(RAW)

    def check(_):
        for name, typ in [("gpu", "gpu-fleet:gpu:GpuRuntime"), ("slurm", "gpu-fleet:slurm:SlurmCluster"),
                          ("accounting", "gpu-fleet:accounting:Accounting"),
                          ("acceptance", "gpu-fleet:acceptance:Acceptance")]:
            assert graph.chain[name] == f"gpu-fleet:index:Fleet${typ}", name
        # no layer's resource hangs under another layer
        assert graph.chain["cluster-id"].startswith("gpu-fleet:accounting:Accounting$")
        assert graph.chain["fleet-acceptance"].startswith("gpu-fleet:acceptance:Acceptance$")
        assert graph.chain["canary-first"].startswith("gpu-fleet:slurm:SlurmCluster$")

    return settled(fleet).apply(check)
