"""The Slurm layer's config: the release every host installs, identities, partitions, cgroups."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

from pydantic import Field

from ...config.project import PROJECT
from ...config.types import (
    DebianVersion, DevicePrefix, DottedVersion, HostName, RemotePath, Sha256, SlurmTime, Strict, Text,
    UserName,
)

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


#: why a K3s-owned node cannot be in a partition unless the K3s retirement layer retires it
K3S_NOT_HANDED_OVER = (
    "K3s still runs it: only the K3s retirement layer hands a node over to Slurm (audit, preserve "
    "with proof, stop, restore on rollback); list it in k3s_retirement.retire (layer enabled) or take "
    "it out of the partition")


class PartitionSpec(Strict):
    name: HostName
    nodes: list[HostName] = Field(min_length=1)
    default: bool = False
    max_time: SlurmTime = "INFINITE"


class SlurmRelease(Strict):
    """A Slurm package release (exact Debian versions) that every host installs and holds."""

    version: DottedVersion
    debian_version: DebianVersion
    source_sha256: Optional[Sha256] = None
    munge_version: Optional[DebianVersion] = None
    pmix_version: Optional[DebianVersion] = None
    #: where the release's .debs are on the storage host (the build output)
    source_dir: RemotePath = "/srv/gpu-fleet/build/slurm"

    def controller_packages(self) -> dict[str, str]:
        pkgs = {"slurmctld": self.debian_version, "slurm-client": self.debian_version}
        if self.munge_version:
            pkgs["munge"] = self.munge_version
        if self.pmix_version:
            pkgs["libpmix2"] = self.pmix_version
        return pkgs

    def node_packages(self) -> dict[str, str]:
        pkgs = {"slurmd": self.debian_version, "slurm-client": self.debian_version}
        if self.munge_version:
            pkgs["munge"] = self.munge_version
        if self.pmix_version:  # the seed: PMIx plugin built, runtime missing on the node
            pkgs["libpmix2"] = self.pmix_version
        return pkgs


class SlurmLayer(Strict):
    enabled: bool = True
    cluster_name: HostName = "gpu-fleet"
    release: SlurmRelease = SlurmRelease(version="26.05.4", debian_version="26.05.4-1+v1001")
    slurm_uid: int = Field(64030, ge=1, le=2**31)
    slurm_gid: int = Field(64030, ge=1, le=2**31)
    #: a system id (100-999): Debian's munge package removes its account on purge with
    #: `deluser --system`, which refuses any other id and so fails the rollback.
    munge_uid: int = Field(440, ge=1, le=2**31)
    munge_gid: int = Field(440, ge=1, le=2**31)
    cgroup_plugin: Literal["autodetect", "cgroup/v1", "cgroup/v2"] = "autodetect"
    def_mem_per_cpu_mib: int = Field(2048, ge=1)
    gpu_device_prefix: DevicePrefix = "/dev/nvidia"
    gres_autodetect: Literal["nvml", "off"] = "nvml"
    #: False only where the kernel lacks swap accounting (the lab's containers); say why.
    constrain_swap: bool = True
    constrain_swap_reason: Optional[Text] = None
    #: Test double: create GPU device files (char 195:N) on nodes that have no GPU (the lab).
    fake_gpu_devices: bool = False
    canary_user: UserName = "fleetcanary"
    canary_uid: int = Field(64200, ge=1000, le=2**31)
    partitions: list[PartitionSpec] = Field(default_factory=list)




def check(cfg: FleetConfig) -> list[str]:
    """Partitions name known nodes once each, that Slurm may take; ids Debian's packages accept."""
    problems: list[str] = []
    by_name = {n.name: n for n in cfg.nodes}

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
            elif node.owner == "k3s" and not (cfg.k3s_retirement.enabled and name in cfg.k3s_retirement.retire):
                problems.append(f"{where}: node {name!r} is owned by k3s: {K3S_NOT_HANDED_OVER}")

    s = cfg.slurm
    if not s.constrain_swap and not (s.constrain_swap_reason or "").strip():
        problems.append(f"{PROJECT}:slurm.constrain_swap_reason: turning off swap confinement "
                        "needs a written reason")
    for f in ("munge_uid", "munge_gid"):
        if not 100 <= getattr(s, f) <= 999:
            problems.append(
                f"{PROJECT}:slurm.{f}: {getattr(s, f)} is not a system id (100-999); Debian's munge "
                "package removes its account with `deluser --system` on purge, which refuses other ids")
    if s.slurm_uid == s.munge_uid:
        problems.append(f"{PROJECT}:slurm.munge_uid: must differ from slurm_uid ({s.slurm_uid})")
    if s.slurm_gid == s.munge_gid:
        problems.append(f"{PROJECT}:slurm.munge_gid: must differ from slurm_gid ({s.slurm_gid})")
    return problems
