"""The storage layer's config: ZFS datasets with separate duties, NFS exports and mounts."""

from __future__ import annotations

import ipaddress
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Literal, Optional

from pydantic import Field, IPvAnyNetwork

from ...config.project import PROJECT
from ...config.types import DebianVersion, DirName, PackageName, RemotePath, Strict, ZfsName, is_ip

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


class StoreSpec(Strict):
    """One dataset with one duty: where it is mounted on the storage host (and exported from)
    and where every Slurm node mounts it."""

    dataset: ZfsName
    mountpoint: RemotePath
    client_mount: RemotePath


class StorageLayer(Strict):
    """ZFS datasets with separate duties (models read-only, data read-write) on the storage
    host, exported over NFS to the client network and mounted on every Slurm node.

    The pool is the admin's: the layer checks it is imported and healthy, never creates or
    destroys it. `server`: `kernel` (nfsd, /etc/exports.d) on a real fleet, `ganesha`
    (nfs-ganesha, FSAL VFS) where the kernel has no nfsd (the lab). `client`: `kernel` NFS
    mounts on a real fleet; `fuse-libnfs` is a TEST DOUBLE of the kernel client (a FUSE
    filesystem over libnfs, speaking real NFS to the real server) for kernels without one."""

    enabled: bool = False
    pool: ZfsName = "ai"
    models: StoreSpec = StoreSpec(dataset="ai/models", mountpoint="/srv/ai/models",
                                  client_mount="/mnt/models")
    data: StoreSpec = StoreSpec(dataset="ai/data", mountpoint="/srv/ai/data", client_mount="/mnt/data")
    #: directories the data dataset always has (job roots, inputs, outputs)
    data_dirs: list[DirName] = Field(default_factory=lambda: ["jobs", "inputs", "outputs"], min_length=1)
    #: who may mount: the compute network (never everyone)
    clients: Optional[IPvAnyNetwork] = None
    server: Literal["kernel", "ganesha"] = "kernel"
    client: Literal["kernel", "fuse-libnfs"] = "kernel"
    #: exact Debian packages of the NFS server on the storage host (nfs-kernel-server, or
    #: nfs-ganesha + nfs-ganesha-vfs), installed and held; empty: the host already has it
    server_packages: dict[PackageName, DebianVersion] = Field(default_factory=dict)
    #: exact packages every node needs to mount (nfs-common; the lab's FUSE double's libraries)
    client_packages: dict[PackageName, DebianVersion] = Field(default_factory=dict)



def check(cfg: FleetConfig) -> list[str]:
    """The storage layer's rules: datasets in the pool, separate duties, a client network
    that holds every Slurm node and not everyone."""
    st = cfg.storage
    if not st.enabled:
        return []
    where = f"{PROJECT}:storage"
    problems = []
    for duty in ("models", "data"):
        spec = getattr(st, duty)
        if not spec.dataset.startswith(st.pool + "/"):
            problems.append(f"{where}.{duty}.dataset: {spec.dataset!r} is not a dataset of the pool "
                            f"{st.pool!r} (storage.pool)")
    m, d = st.models, st.data
    for field, a, b in (("dataset", m.dataset, d.dataset), ("mountpoint", m.mountpoint, d.mountpoint),
                        ("client_mount", m.client_mount, d.client_mount)):
        pa, pb = PurePosixPath(a), PurePosixPath(b)
        if pa == pb or pa in pb.parents or pb in pa.parents:
            problems.append(f"{where}.data.{field}: {b!r} and storage.models.{field} {a!r} overlap; "
                            "models (read-only) and data (read-write) need separate places")
    if len(set(st.data_dirs)) != len(st.data_dirs):
        problems.append(f"{where}.data_dirs: a directory is listed twice")
    if st.clients is None:
        problems.append(f"{where}.clients: required: the network that may mount the exports "
                        "(the compute network's CIDR)")
        return problems
    if st.clients.prefixlen == 0:
        problems.append(f"{where}.clients: {st.clients} is every address; give the compute network")
    for i, n in enumerate(cfg.nodes):
        if n in cfg.slurm_nodes() and is_ip(n.address) and \
                ipaddress.ip_address(n.address) not in st.clients:
            problems.append(f"{PROJECT}:nodes[{i}] ({n.name}).address: {n.address} is outside "
                            f"storage.clients ({st.clients}), so it could not mount the store")
    return problems
