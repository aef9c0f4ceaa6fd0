"""What every layer shares: the fleet's hosts and nodes, how SSH reaches them, the project root.

Fleet builds one `Site` and hands it to each layer's inputs beside the layer's own config
section, so a layer's inputs say what it reads without carrying the whole stack config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config.hosts import HostSpec, Hosts, NodeSpec, SshSpec
from .hosts import conn_input


@dataclass(frozen=True, kw_only=True)
class Site:
    hosts: Hosts
    #: every node of the stack, in stack order
    nodes: tuple[NodeSpec, ...]
    ssh: SshSpec
    #: the project root: key and known_hosts paths and shipped files are relative to it
    root: Path
    #: the nodes the Slurm partitions name; the layers that work on "the Slurm nodes"
    #: (storage mounts, guards, the snapshot view) read them here, not in the slurm section
    slurm_members: frozenset[str] = frozenset()

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)

    def slurm_nodes(self) -> list[NodeSpec]:
        """Nodes that belong in Slurm partitions, in stack order."""
        return [n for n in self.nodes if n.name in self.slurm_members]

    def canary_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.canary]

    def conn(self, host: HostSpec) -> dict:
        """The `conn` input of a host primitive on `host`."""
        return conn_input(host, self.ssh, self.root)
