"""Which nodes Slurm admits, decided in one place from every gating layer's verdicts.

A node the stack puts in a partition joins Slurm only when every gate that
judges it lets it through; each refusal keeps the first reason a gate gave, so
the stack output says why a node is out ("gpu_runtime: node gpu03 reports 7
GPUs, the stack declares 8"). Gates are the verdict Outputs of layers (the GPU
baseline today; K3s retirement, storage mounts and node health as they land):
a layer hands over a `Gate`, `Fleet` passes the gates here, and the Slurm layer
renders its config from `Admission.admitted` alone.

Fail closed: a node a gate judges but did not pass is refused, also when the
gate has no verdict for it. Static refusals need no layer: an `unreachable`
node never joins, and a K3s-owned node joins only through the K3s retirement
layer's gate (stopped, with a sealed bundle). The config check refuses
both before any host is touched; this is the same rule where the rendered
config is decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi

from .config.fleet import FleetConfig
from .config.hosts import NodeSpec

#: why a node is never admitted whatever the gates say, by owner
STATIC_REFUSALS = {
    "unreachable": "unreachable: kept pending until it is re-verified",
    "k3s": ("k3s: K3s still runs this node and no layer has handed it over (it is not in "
            "k3s_retirement.retire)"),
}


@dataclass(frozen=True)
class Gate:
    """One gating layer's verdict: which of the nodes it judges passed, and why others did not."""

    layer: str
    #: the nodes this gate judges (others pass it untouched), e.g. the GPU nodes
    judges: frozenset[str]
    passed: pulumi.Output[list]
    #: node -> reasons for the nodes it refused (may lack a node: "no verdict" is a refusal)
    reasons: pulumi.Output[dict]


@dataclass(frozen=True)
class Admission:
    """What the Slurm layer takes: `admitted` (stack order) and `refused` (node -> reason)."""

    admitted: pulumi.Output[list]
    refused: pulumi.Output[dict]

    def exports(self) -> dict[str, pulumi.Input]:
        return {"admission": pulumi.Output.all(self.admitted, self.refused).apply(
            lambda t: {"admitted": t[0], "refused": t[1]})}


def decide(candidates: Sequence[NodeSpec], verdicts: Mapping[str, tuple[frozenset, list, dict]]
           ) -> tuple[list[str], dict[str, str]]:
    """Pure: candidates in stack order and each gate's (judges, passed, reasons) ->
    (admitted, refused node -> first reason)."""
    admitted, refused = [], {}
    for n in candidates:
        why: Optional[str] = STATIC_REFUSALS.get(n.owner)
        if n.owner == "k3s" and n.name in verdicts.get("k3s_retirement", (frozenset(),))[0]:
            why = None  # the retirement layer judges it: handed over only once stopped and sealed
        for layer, (judges, passed, reasons) in verdicts.items():
            if why is None and n.name in judges and n.name not in (passed or []):
                given = (reasons or {}).get(n.name) or ["no verdict for this node"]
                why = f"{layer}: {given[0]}"
        if why is None:
            admitted.append(n.name)
        else:
            refused[n.name] = why
    return admitted, refused


def admit(cfg: FleetConfig, gates: Sequence[Gate]) -> Admission:
    """The stack's partition nodes, through every gate."""
    candidates = cfg.slurm_nodes()
    layers = [g.layer for g in gates]
    both = pulumi.Output.all(*[pulumi.Output.all(g.passed, g.reasons) for g in gates]).apply(
        lambda got: decide(candidates, {layer: (g.judges, p, r)
                                        for layer, g, (p, r) in zip(layers, gates, got)}))
    return Admission(admitted=both.apply(lambda t: t[0]), refused=both.apply(lambda t: t[1]))
