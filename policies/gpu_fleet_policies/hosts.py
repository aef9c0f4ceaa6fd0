"""Hosts: no K3s-owned or unreachable node in a Slurm partition.

The seed's audit found nodes still running K3s pods and one node that could not be reached;
adding either to a partition hands jobs to a node that cannot run them, or takes a node
from under K3s without keeping its state. Checked on the inventory's Host components, whose
outputs record each node's owner and whether it is in a Slurm partition (`inSlurm`):

- owner `unreachable` and in Slurm: always refused (re-verify the node, then change its owner);
- owner `k3s` and in Slurm: always refused while the K3s retirement layer is not built. Only
  that layer can hand a node over (audit, preserve, stop, restore on rollback); a
  `gpu-fleet:k3s_retirement` section in the stack config is no proof, since nothing acts on it.

A stack policy: component inputs are empty, only their registered outputs are visible.
"""

from __future__ import annotations

from . import props as P
from .common import stack_resources

#: why a K3s-owned node may not be in a partition (the program's config check says the same)
K3S_NOT_HANDED_OVER = (
    "K3s still runs it, and the K3s retirement layer that hands a node over to Slurm (audit, "
    "preserve, stop, restore on rollback) is not built yet; take it out of gpu-fleet:slurm.partitions "
    "until then")


def validate_slurm_membership(args, report_violation) -> None:
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
            report_violation(
                f'Host "{name}" is owned by K3s but is in a Slurm partition: {K3S_NOT_HANDED_OVER}.',
                res.urn or None)
