"""Hosts: no K3s-owned or unreachable node in a Slurm partition.

The seed's audit found nodes still running K3s pods and one node that could not be reached;
adding either to a partition hands jobs to a node that cannot run them, or takes a node
from under K3s without keeping its state. Checked on the inventory's Host components, whose
outputs record each node's owner and whether it is in a Slurm partition (`inSlurm`):

- owner `unreachable` and in Slurm: always refused (re-verify the node, then change its owner);
- owner `k3s` and in Slurm: refused unless the stack retires the node from K3s
  (`gpu-fleet:k3s_retirement` enabled, node listed in `retire`). The stack config comes from
  the engine; if the pack did not receive it, the node is refused (fail closed).

A stack policy: component inputs are empty, only their registered outputs are visible.
"""

from __future__ import annotations

from . import props as P
from . import stackconfig
from .common import stack_resources


def validate_slurm_membership(args, report_violation) -> None:
    retiring = stackconfig.retiring_nodes(stackconfig.get())
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
        elif owner == "k3s" and (retiring is None or name not in retiring):
            why = ("the pack did not receive the stack's config, so its K3s retirement cannot "
                   "be confirmed" if retiring is None else "the stack does not retire it from K3s")
            report_violation(
                f'Host "{name}" is owned by K3s but is in a Slurm partition, and {why}; list it '
                f"in gpu-fleet:k3s_retirement.retire (with enabled: true) or remove it from "
                f"gpu-fleet:slurm.partitions.", res.urn or None)
