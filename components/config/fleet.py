"""The whole stack's model, assembled from the layers' own sections, and the rules between hosts.

Each layer's section is one field of `FleetConfig`, annotated with `Layer(check)`: that field is
the registry. `LAYERS` (section key, model, check) is derived from it, and so is the refusal of
a section whose layer is not built (`NOT_BUILT`). Adding a layer is one field here and one line
out of `NOT_BUILT`; its model and rules live in `components/layers/<layer>/config.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Callable, Optional

from pydantic import Field, PrivateAttr

from ..layers.acceptance.config import AcceptanceLayer, check as acceptance_check
from ..layers.accounting.config import AccountingLayer, check as accounting_check
from ..layers.gpu_runtime.config import GpuRuntimeLayer
from ..layers.guards.config import GuardsLayer, check as guards_check
from ..layers.health.config import HealthLayer, check as health_check
from ..layers.k3s_retirement.config import K3sRetirementLayer, check as k3s_check
from ..layers.model_snapshot.config import ModelSnapshotLayer, check as model_check
from ..layers.slurm.config import SlurmLayer, check as slurm_check
from ..layers.storage.config import StorageLayer, check as storage_check
from ..layers.tenancy.config import TenancyLayer, check as tenancy_check
from ..layers.web.config import WebLayer, check as web_check
from ..layers.workload.config import WorkloadLayer, check as workload_check
from .hosts import Hosts, NodeSpec, SshSpec
from .project import PROJECT
from .types import Strict

#: layers the seed describes whose code does not exist yet: config key -> what the layer is.
#: A section for one of them is an error (it would do nothing); landing a layer removes its
#: line here and adds its field to FleetConfig.
NOT_BUILT: dict[str, str] = {}

Check = Callable[["FleetConfig"], list[str]]


@dataclass(frozen=True)
class Layer:
    """Marks a FleetConfig field as a layer's section; `check` holds the layer's rules that need
    the whole fleet (each problem names its field path)."""

    check: Optional[Check] = None


@dataclass(frozen=True)
class LayerEntry:
    key: str
    model: type[Strict]
    check: Optional[Check]


class FleetConfig(Strict):
    """The whole stack configuration; each field is one `gpu-fleet:<field>` key (the layers
    in NOT_BUILT have none yet)."""

    ssh: SshSpec = SshSpec()
    hosts: Hosts
    #: the node list, inline or (`gpu-fleet:nodes_file`) read from a file of its own
    nodes: list[NodeSpec] = Field(min_length=1)
    #: (path, SHA-256) of the nodes file the list came from, if it did
    _nodes_file: Optional[tuple[str, str]] = PrivateAttr(default=None)

    storage: Annotated[StorageLayer, Layer(storage_check)] = StorageLayer()
    gpu_runtime: Annotated[GpuRuntimeLayer, Layer()] = GpuRuntimeLayer()
    slurm: Annotated[SlurmLayer, Layer(slurm_check)] = SlurmLayer()
    accounting: Annotated[AccountingLayer, Layer(accounting_check)] = AccountingLayer()
    model_snapshot: Annotated[ModelSnapshotLayer, Layer(model_check)] = ModelSnapshotLayer()
    k3s_retirement: Annotated[K3sRetirementLayer, Layer(k3s_check)] = K3sRetirementLayer()
    web: Annotated[WebLayer, Layer(web_check)] = WebLayer()
    guards: Annotated[GuardsLayer, Layer(guards_check)] = GuardsLayer()
    health: Annotated[HealthLayer, Layer(health_check)] = HealthLayer()
    tenancy: Annotated[TenancyLayer, Layer(tenancy_check)] = TenancyLayer()
    acceptance: Annotated[AcceptanceLayer, Layer(acceptance_check)] = AcceptanceLayer()
    workload: Annotated[WorkloadLayer, Layer(workload_check)] = WorkloadLayer()

    @property
    def nodes_file(self) -> Optional[tuple[str, str]]:
        return self._nodes_file

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)

    def slurm_nodes(self) -> list[NodeSpec]:
        """Nodes that belong in Slurm partitions, in stack order."""
        members = {m for p in self.slurm.partitions for m in p.nodes}
        return [n for n in self.nodes if n.name in members]

    def canary_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.canary]


#: every built layer's section, in the stack model's order
LAYERS: tuple[LayerEntry, ...] = tuple(
    LayerEntry(key, info.annotation, marker.check)  # type: ignore[arg-type]
    for key, info in FleetConfig.model_fields.items()
    for marker in info.metadata if isinstance(marker, Layer))

def cross_check(cfg: FleetConfig) -> list[str]:
    """Rules that need the whole fleet: hosts and nodes, then each layer's own, in LAYERS order."""
    problems = _hosts_check(cfg)
    for entry in LAYERS:
        if entry.check is not None:
            problems += entry.check(cfg)
    return problems


def _hosts_check(cfg: FleetConfig) -> list[str]:
    """Names and addresses unique across hosts and nodes; canaries that Slurm may take."""
    problems: list[str] = []
    seen_names: dict[str, str] = {}
    seen_addrs: dict[str, str] = {}

    def claim(name: str, addr: str, where: str, host_pair_ok: bool = False) -> None:
        if name in seen_names and not host_pair_ok:
            problems.append(f"{where}.name: duplicate host name {name!r} (also {seen_names[name]})")
        if addr in seen_addrs and not host_pair_ok:
            problems.append(
                f"{where}.address: duplicate address {addr!r} (also {seen_addrs[addr]})"
            )
        seen_names.setdefault(name, where)
        seen_addrs.setdefault(addr, where)

    st, ctl = cfg.hosts.storage, cfg.hosts.controller
    claim(st.name, st.address, f"{PROJECT}:hosts.storage")
    same_host = (st.name, st.address) == (ctl.name, ctl.address)
    if not same_host and (st.name == ctl.name or st.address == ctl.address):
        problems.append(
            f"{PROJECT}:hosts.controller: shares a name or address with hosts.storage but not "
            "both; give the same name and address to run both roles on one host"
        )
    else:
        claim(ctl.name, ctl.address, f"{PROJECT}:hosts.controller", host_pair_ok=same_host)
    for i, n in enumerate(cfg.nodes):
        claim(n.name, n.address, f"{PROJECT}:nodes[{i}] ({n.name})")

    for i, n in enumerate(cfg.nodes):
        if n.canary and n.owner in ("k3s", "unreachable"):
            problems.append(
                f"{PROJECT}:nodes[{i}] ({n.name}).canary: a canary node must be owned by slurm "
                f"or free, not {n.owner}"
            )
    return problems
