"""The GPU runtime layer's wiring: its gate's verdicts decide admission, with the reason."""

from __future__ import annotations

import pulumi

from .wiring import RAW, build


@pulumi.runtime.test
def test_admission_refuses_a_node_the_gpu_gate_failed_and_says_why(graph):
    fleet = build(RAW)
    gate = fleet.gpu.gate
    assert gate.judges == frozenset({"gpu01", "gpu02", "gpu03"})

    def check(out):
        # the mock baseline passes every node it probed
        assert out == {"admitted": ["gpu01", "gpu02", "gpu03"], "refused": {}}

    return fleet.admission.exports()["admission"].apply(check)
