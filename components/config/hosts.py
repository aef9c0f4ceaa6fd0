"""The fleet's hosts, nodes and how SSH reaches them: what every layer shares."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from .types import Address, GresType, HostName, LocalPath, ProxyJump, Strict, Text, UserName

Owner = Literal["k3s", "slurm", "free", "unreachable"]


class HostSpec(Strict):
    """A host the program reaches over SSH."""

    name: HostName
    address: Address
    ssh_port: int = Field(22, ge=1, le=65535)


class GpuSpec(Strict):
    """GPUs a node must present; `type` is the Slurm GRES type (gpu:<type>:<count>)."""

    count: int
    type: GresType = "v100"
    model: Text = "Tesla V100-SXM2-16GB"

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


class Hosts(Strict):
    """Service hosts. The seed runs the controller on the storage server; both may name one host."""

    storage: HostSpec
    controller: HostSpec


class SshSpec(Strict):
    """How the transport reaches hosts; `~/.ssh/config` still applies unless disabled."""

    user: UserName = "root"
    identity_file: Optional[LocalPath] = None
    known_hosts_file: Optional[LocalPath] = None
    proxy_jump: Optional[ProxyJump] = None
    use_ssh_config: bool = True
    connect_timeout_s: int = Field(10, ge=1, le=300)
    max_parallel: int = Field(16, ge=1, le=256)

