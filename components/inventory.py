"""The fleet inventory: one component per host, with its roles and ownership.

A preview lists every host the stack knows with its roles, owner and GPUs, so
it shows which hosts a stack manages and which it leaves alone (nodes owned by
K3s until the K3s retirement layer hands them over, unreachable nodes kept
pending). The layers' resources are children of their layer, not of a host.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from .config.fleet import FleetConfig


@dataclass(frozen=True)
class HostRecord:
    """A host as the stack sees it: address, roles, owner and GPUs."""

    name: str
    address: str
    roles: tuple[str, ...]
    owner: str
    in_slurm: bool
    gpus: int
    gpu_type: str | None


def host_records(cfg: FleetConfig) -> list[HostRecord]:
    """Every host once, service hosts first; storage and controller merge when they are one host."""
    records: dict[str, HostRecord] = {}
    for role, h in (("storage", cfg.hosts.storage), ("controller", cfg.hosts.controller)):
        prev = records.get(h.name)
        roles = (prev.roles if prev else ()) + (role,)
        records[h.name] = HostRecord(h.name, h.address, roles, "service", False, 0, None)
    in_slurm = {n.name for n in cfg.slurm_nodes()}
    for n in cfg.nodes:
        roles = ("compute",) + (("canary",) if n.canary else ())
        records[n.name] = HostRecord(
            n.name, n.address, roles, n.owner, n.name in in_slurm, n.gpus.count if n.gpus else 0,
            n.gpus.type if n.gpus else None,
        )
    return list(records.values())


def fleet_summary(cfg: FleetConfig) -> dict:
    """Counts a stack promises once fully applied; exported so a preview shows the target."""
    slurm = cfg.slurm_nodes()
    by_owner: dict[str, int] = {}
    for n in cfg.nodes:
        by_owner[n.owner] = by_owner.get(n.owner, 0) + 1
    return {
        "nodes_by_owner": by_owner,
        "slurm_nodes": len(slurm),
        "slurm_cpus": sum(n.cpus for n in slurm),
        "slurm_memory_mib": sum(n.real_memory_mib for n in slurm),
        "slurm_gpus": sum(n.gpus.count for n in slurm if n.gpus),
        "pending_nodes": [n.name for n in cfg.nodes if n.owner == "unreachable"],
        "canary_nodes": [n.name for n in cfg.canary_nodes()],
        # a preview shows a changed node file as a changed output, whatever else changes
        **({"nodes_file": {"path": cfg.nodes_file[0], "sha256": cfg.nodes_file[1]}} if cfg.nodes_file else {}),
    }


class Host(pulumi.ComponentResource):
    """One host of the stack, its record as outputs (a preview's list of hosts)."""

    def __init__(self, record: HostRecord, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:inventory:Host", record.name, None, opts)
        self.record = record
        self.register_outputs(
            {
                "address": record.address,
                "roles": list(record.roles),
                "owner": record.owner,
                "inSlurm": record.in_slurm,
                "gpus": record.gpus,
                "gpuType": record.gpu_type,
            }
        )


class Inventory(pulumi.ComponentResource):
    """All hosts of the stack, keyed by name."""

    def __init__(self, cfg: FleetConfig, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:inventory:Inventory", "inventory", None, opts)
        self.hosts = {
            r.name: Host(r, pulumi.ResourceOptions(parent=self)) for r in host_records(cfg)
        }
        self.register_outputs({"hosts": sorted(self.hosts)})
