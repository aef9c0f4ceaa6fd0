"""Typed model of a stack's configuration, validated before any host is touched.

A stack file (`stacks/Pulumi.<stack>.yaml`) holds one structured key per
concern under the project namespace (`gpu-fleet:hosts`, `gpu-fleet:nodes`,
`gpu-fleet:slurm`, ...). `parse_fleet_config` turns those raw values into a
`FleetConfig` or raises one `ConfigError` that lists every problem with the
stack file and the field path (`gpu-fleet:nodes[3] (gpu04).gpus.count`), so a
user fixes them all in one pass. Pydantic checks shapes and types; the
cross-field rules (duplicates, partition membership) live in `_cross_check`
because they need the whole fleet.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError

PROJECT = "gpu-fleet"
STACK_CONFIG_DIR = "stacks"

Owner = Literal["k3s", "slurm", "free", "unreachable"]
HostName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")]
_DNS_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def stack_file(stack: str) -> str:
    """Path of a stack's config file relative to the project root."""
    return f"{STACK_CONFIG_DIR}/Pulumi.{stack}.yaml"


class _Strict(BaseModel):
    """Unknown fields are errors: a typo must not silently fall back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class HostSpec(_Strict):
    """A host the program reaches over SSH."""

    name: HostName
    address: str
    ssh_port: int = Field(22, ge=1, le=65535)

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
            return v
        except ValueError:
            pass
        labels = v.rstrip(".").split(".")
        if not v or len(v) > 253 or not all(_DNS_LABEL.match(x) for x in labels):
            raise ValueError(f"{v!r} is neither an IP address nor a DNS name")
        return v


class GpuSpec(_Strict):
    """GPUs a node must present; `type` is the Slurm GRES type (gpu:<type>:<count>)."""

    count: int
    type: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")] = "v100"
    model: str = "Tesla V100-SXM2-16GB"

    @field_validator("count")
    @classmethod
    def _count(cls, v: int) -> int:
        if v < 1:
            raise ValueError(
                f"a GPU node needs at least 1 GPU (got {v}); omit `gpus` for a CPU-only node"
            )
        return v


class NodeSpec(HostSpec):
    """A compute node. `owner` records who runs it today (the seed's audit)."""

    owner: Owner
    cpus: int = Field(ge=1)
    real_memory_mib: int = Field(ge=1, description="scheduler memory, not physical RAM")
    gpus: Optional[GpuSpec] = None
    canary: bool = False


class Hosts(_Strict):
    """Service hosts. The seed runs the controller on the storage server; both may name one host."""

    storage: HostSpec
    controller: HostSpec


class SshSpec(_Strict):
    """How the transport reaches hosts; `~/.ssh/config` still applies unless disabled."""

    user: str = "root"
    identity_file: Optional[str] = None
    known_hosts_file: Optional[str] = None
    proxy_jump: Optional[str] = None
    use_ssh_config: bool = True
    connect_timeout_s: int = Field(10, ge=1, le=300)
    max_parallel: int = Field(16, ge=1, le=256)


class PartitionSpec(_Strict):
    name: HostName
    nodes: list[HostName] = Field(min_length=1)
    default: bool = False
    max_time: str = "INFINITE"


class StorageLayer(_Strict):
    """ZFS datasets with separate duties (models read-only, data read-write) and their NFS exports."""

    enabled: bool = True
    pool: str = "ai"
    models_dataset: str = "ai/models"
    data_dataset: str = "ai/data"
    models_export: str = "/srv/ai/models"
    data_export: str = "/srv/ai/data"
    export_clients: str = "192.0.2.0/24"
    models_mount: str = "/mnt/models"
    data_mount: str = "/mnt/data"

    @field_validator("export_clients")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            ipaddress.ip_network(v, strict=False)
        except ValueError as e:
            raise ValueError(f"{v!r} is not a network (CIDR): {e}") from None
        return v


class GpuRuntimeLayer(_Strict):
    """The GPU baseline every node must match (the seed unified on 580.173.02 / CUDA 12.9.1)."""

    enabled: bool = True
    driver_version: str = "580.173.02"
    cuda_runtime: str = "12.9.1"


class SlurmRelease(_Strict):
    """A Slurm package release published to the versioned repository on storage."""

    version: str
    debian_version: str
    source_sha256: Optional[Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = None


class SlurmLayer(_Strict):
    enabled: bool = True
    cluster_name: HostName = "gpu-fleet"
    release: SlurmRelease = SlurmRelease(version="26.05.4", debian_version="26.05.4-1+v1001")
    slurm_uid: int = Field(64030, ge=1, le=2**31)
    slurm_gid: int = Field(64030, ge=1, le=2**31)
    munge_uid: int = Field(64031, ge=1, le=2**31)
    munge_gid: int = Field(64031, ge=1, le=2**31)
    cgroup_plugin: Literal["autodetect", "cgroup/v1", "cgroup/v2"] = "autodetect"
    def_mem_per_cpu_mib: int = Field(2048, ge=1)
    gpu_device_prefix: Annotated[str, Field(pattern=r"^/dev/[A-Za-z0-9_/-]+$")] = "/dev/nvidia"
    gres_autodetect: Literal["nvml", "off"] = "nvml"
    partitions: list[PartitionSpec] = Field(default_factory=list)


class AccountingLayer(_Strict):
    enabled: bool = False
    database: str = "slurm_acct_db"
    db_user: str = "slurm"


class WebLayer(_Strict):
    enabled: bool = False
    listen_address: str = "127.0.0.1"
    port: int = Field(5011, ge=1, le=65535)


class K3sRetirementLayer(_Strict):
    """Retire-and-keep: K3s nodes listed here are handed to Slurm, their state preserved."""

    enabled: bool = False
    retire: list[HostName] = Field(default_factory=list)


class ModelSnapshotLayer(_Strict):
    enabled: bool = False
    repo_id: Optional[str] = None
    revision: Optional[str] = None


class AcceptanceLayer(_Strict):
    enabled: bool = True
    job_timeout_s: int = Field(300, ge=10)


class GuardsLayer(_Strict):
    enabled: bool = False
    max_gpu_temp_c: int = Field(85, ge=40, le=120)
    min_free_host_memory_mib: int = Field(4096, ge=0)


class TenancyLayer(_Strict):
    enabled: bool = False


class FleetConfig(_Strict):
    """The whole stack configuration; each field is one `gpu-fleet:<field>` key."""

    ssh: SshSpec = SshSpec()
    hosts: Hosts
    nodes: list[NodeSpec] = Field(min_length=1)
    storage: StorageLayer = StorageLayer()
    gpu_runtime: GpuRuntimeLayer = GpuRuntimeLayer()
    slurm: SlurmLayer = SlurmLayer()
    accounting: AccountingLayer = AccountingLayer()
    web: WebLayer = WebLayer()
    k3s_retirement: K3sRetirementLayer = K3sRetirementLayer()
    model_snapshot: ModelSnapshotLayer = ModelSnapshotLayer()
    acceptance: AcceptanceLayer = AcceptanceLayer()
    guards: GuardsLayer = GuardsLayer()
    tenancy: TenancyLayer = TenancyLayer()

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)

    def slurm_nodes(self) -> list[NodeSpec]:
        """Nodes that belong in Slurm partitions, in stack order."""
        members = {m for p in self.slurm.partitions for m in p.nodes}
        return [n for n in self.nodes if n.name in members]

    def canary_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.canary]


def _format_loc(loc: tuple[Any, ...], raw: dict[str, Any]) -> str:
    """('nodes', 3, 'gpus', 'count') -> 'gpu-fleet:nodes[3] (gpu04).gpus.count'."""
    out = ""
    node = raw
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
            try:
                node = node[part]
                if isinstance(node, dict) and isinstance(node.get("name"), str):
                    out += f" ({node['name']})"
            except (KeyError, IndexError, TypeError):
                node = None
        else:
            out += f"{PROJECT}:{part}" if i == 0 else f".{part}"
            node = node.get(part) if isinstance(node, dict) else None
    return out or PROJECT


def _cross_check(cfg: FleetConfig) -> list[str]:
    """Rules that need the whole fleet; each problem names its field path."""
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

    by_name = {n.name: n for n in cfg.nodes}
    for i, n in enumerate(cfg.nodes):
        if n.canary and n.owner in ("k3s", "unreachable"):
            problems.append(
                f"{PROJECT}:nodes[{i}] ({n.name}).canary: a canary node must be owned by slurm "
                f"or free, not {n.owner}"
            )

    retiring = set(cfg.k3s_retirement.retire) if cfg.k3s_retirement.enabled else set()
    for j, name in enumerate(cfg.k3s_retirement.retire):
        node = by_name.get(name)
        where = f"{PROJECT}:k3s_retirement.retire[{j}]"
        if node is None:
            problems.append(f"{where}: unknown node {name!r}")
        elif node.owner != "k3s":
            problems.append(f"{where}: node {name!r} is owned by {node.owner}, not k3s")

    defaults = [p.name for p in cfg.slurm.partitions if p.default]
    if len(defaults) > 1:
        problems.append(
            f"{PROJECT}:slurm.partitions: more than one default partition ({', '.join(defaults)})"
        )
    part_names: set[str] = set()
    for pi, p in enumerate(cfg.slurm.partitions):
        pwhere = f"{PROJECT}:slurm.partitions[{pi}] ({p.name})"
        if p.name in part_names:
            problems.append(f"{pwhere}.name: duplicate partition name {p.name!r}")
        part_names.add(p.name)
        seen: set[str] = set()
        for ni, name in enumerate(p.nodes):
            where = f"{pwhere}.nodes[{ni}]"
            node = by_name.get(name)
            if name in seen:
                problems.append(f"{where}: node {name!r} listed twice")
            seen.add(name)
            if node is None:
                problems.append(f"{where}: unknown node {name!r}")
            elif node.owner == "unreachable":
                problems.append(
                    f"{where}: node {name!r} is unreachable and stays pending; "
                    "it cannot join a partition until it is re-verified"
                )
            elif node.owner == "k3s" and name not in retiring:
                problems.append(
                    f"{where}: node {name!r} is owned by k3s; list it in "
                    "k3s_retirement.retire (enabled) before adding it to a partition"
                )

    s = cfg.slurm
    if s.slurm_uid == s.munge_uid:
        problems.append(f"{PROJECT}:slurm.munge_uid: must differ from slurm_uid ({s.slurm_uid})")
    if s.slurm_gid == s.munge_gid:
        problems.append(f"{PROJECT}:slurm.munge_gid: must differ from slurm_gid ({s.slurm_gid})")
    return problems


def _decode(value: Any) -> Any:
    """Pulumi hands structured config values to the program as JSON text."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def parse_fleet_config(raw: dict[str, Any], source: str) -> FleetConfig:
    """Validate raw `gpu-fleet:*` config values; raise ConfigError listing every problem.

    `raw` maps keys with or without the `gpu-fleet:` prefix to values (decoded
    or JSON text); keys of other namespaces are ignored. `source` names the
    stack file in messages.
    """
    data: dict[str, Any] = {}
    for key, value in raw.items():
        ns, sep, name = key.partition(":")
        if sep and ns != PROJECT:
            continue
        data[name if sep else key] = _decode(value)
    try:
        cfg = FleetConfig.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
            elif err["type"] == "missing":
                msg = "required field is missing"
            problems.append(f"{_format_loc(tuple(err['loc']), data)}: {msg}")
        raise ConfigError(source, problems) from None
    problems = _cross_check(cfg)
    if problems:
        raise ConfigError(source, problems)
    return cfg


def load_stack_config(stack: str) -> FleetConfig:
    """Read the running program's config from the engine and validate it."""
    from pulumi.runtime.config import get_config_env

    return parse_fleet_config(dict(get_config_env()), stack_file(stack))
