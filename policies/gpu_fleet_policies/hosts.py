"""Hosts: no unreachable node in a Slurm partition, and no K3s node without a sealed bundle.

The seed's audit found nodes still running K3s pods and one node that could not be reached;
adding either to a partition hands jobs to a node that cannot run them, or takes a node
from under K3s without keeping its state. Checked on the inventory's Host components, whose
outputs record each node's owner and whether it is in a Slurm partition (`inSlurm`):

- owner `unreachable` and in Slurm: always refused (re-verify the node, then change its owner);
- owner `k3s` and in Slurm: allowed only when the stack retires it: a `k3s:Stop` for that node
  that waits (directly or through the graph) on a `k3s:Seal` of its change, whose `sealed` flag
  is not known to be false, and whose Seal, once it has run, sealed that node (k3s.py). The
  stack config's `gpu-fleet:k3s_retirement` section is no proof by itself: the resources are.

A stack policy: component inputs are empty, only their registered outputs are visible, and
the retirement's order is in the engine's dependency lists.
"""

from __future__ import annotations

from . import k3s
from . import props as P
from .common import stack_resources


def validate_slurm_membership(args, report_violation) -> None:
    graph = None
    for res in stack_resources(args, P.HOST):
        owner, in_slurm = res.get("owner"), res.get("inSlurm")
        if P.is_unknown(owner) or P.is_unknown(in_slurm):
            continue
        owner, in_slurm = P.text(owner), P.reveal(in_slurm)
        if in_slurm is not True or owner is None:
            continue
        name = res.name
        if owner == "unreachable":
            report_violation(
                f'Host "{name}" is unreachable but is in a Slurm partition; remove it from '
                f"gpu-fleet:slurm.partitions until it is re-verified, then change its owner.",
                res.urn or None)
        elif owner == "k3s":
            if graph is None:
                graph = k3s.Graph(args)
                stops = k3s.stops_by_node(graph)
            problem = k3s.retirement_problem(graph, name, stops.get(name))
            if problem:
                report_violation(
                    f'Host "{name}" is owned by K3s but is in a Slurm partition: {problem}.', res.urn or None)
