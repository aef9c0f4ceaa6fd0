"""The storage layer: ZFS datasets with separate duties, NFS exports gated on their mounts,
and every Slurm node's mounts, proven from the server's side and the client's.

The seed's first broken layer: `/data` existed, the export was configured and `showmount`
listed it, yet the pool was not imported, the directory was an empty folder on the root
disk and every client failed. So here, in order:

1. the pool checked and the datasets created or adopted (`ZfsDatasets`): models
   read-only, data read-write with its job, input and output directories, `sharenfs=off`,
   each marked with its GUID; a store that is not mounted as its dataset stops the rollout
   with what findmnt saw;
2. the NFS server: kernel nfsd (`/etc/exports.d/gpu-fleet.exports`, `mp` so nfsd itself
   refuses an unmounted path, nfs-server after zfs-mount) or nfs-ganesha where the kernel
   has none (the lab; ganesha has no `mp`, so its unit checks every mountpoint before each
   start: `storage-mounted` as ExecStartPre); then `ExportCheck`: what the server really
   exports, to whom;
3. every Slurm node mounts models read-only and data read-write (systemd mount units;
   kernel NFS, or the `fuse-libnfs` TEST DOUBLE of the kernel client in the lab), then
   `ClientCheck` on all of them: mounts as the kernel shows them, the markers, a refused
   write into models, a squashed write into data. It is the layer's admission `Gate`.

Its outputs hand the acceptance job its marker, job root and read-only probe. Rollback
(destroy, or the layer off) unmounts the clients, unexports, and removes the layer's files
and units; the datasets and their data are never destroyed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from ...kit import after_of, sha256
from ...admission import Gate
from ...providers import CommandWithVerify, File, PackageSet, SystemdUnit
from ...scripts import script_path
from ...site import Site
from ..slurm.canary import JobPaths
from .checks import ClientCheck, ExportCheck
from .config import StorageLayer
from .datasets import MARKER, ZfsDatasets
from .render import (
    EXPORTS_FILE, GANESHA_CONF, GANESHA_READY, MOUNTED_CHECK, render_exports, render_ganesha_conf,
    render_ganesha_dropin, render_mount_unit, render_nfs_server_dropin,
)
from .stores import Store, stores as stores_of

#: the data store's directory that jobs write into
JOB_DIR = "jobs"


@dataclass(frozen=True, kw_only=True)
class StorageInputs:
    site: Site
    storage: StorageLayer
    #: a layer writes into the models dataset on the storage host (the model snapshot
    #: layer's staging and publish): it stays read-only for the nodes, through the export
    models_writable: bool = False


@dataclass(frozen=True)
class StorageOutputs:
    #: nodes whose mounts passed the client check (the admission gate)
    gate: Gate
    #: what the acceptance job reads, writes and must fail to write
    job_paths: JobPaths
    datasets: ZfsDatasets
    served: ExportCheck
    clients: ClientCheck
    #: the models store: the model snapshot layer publishes into it on the storage host
    models: Store
    #: every store as a node mounts it ({path, source, fstypes}): what the client check proved
    client_mounts: tuple[dict, ...] = ()

    def exports(self) -> dict[str, pulumi.Input]:
        return {"storage": pulumi.Output.all(self.datasets.guids, self.served.exported, self.clients.passed,
                                             self.clients.reasons).apply(
            lambda t: {"guids": t[0], "exported": t[1], "mountedOn": t[2], "refused": t[3]})}


def _mount_of(dataset: str, mounts: Optional[dict]) -> Any:
    """What ZfsDatasets recorded of `dataset`'s mount (None before it is known)."""
    return (mounts or {}).get(dataset)


class Storage(pulumi.ComponentResource):
    """The stores on the storage host and their mounts on every Slurm node."""

    def __init__(self, name: str, inputs: StorageInputs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-fleet:storage:Storage", name, None, opts)
        site, st = inputs.site, inputs.storage
        host = site.hosts.storage
        conn = site.conn(host)
        after = after_of(self)
        stores = stores_of(st, server=host.address, models_writable=inputs.models_writable)

        datasets = ZfsDatasets("storage-datasets", conn=conn, pool=st.pool, stores=stores,
                               data_dirs=list(st.data_dirs), opts=after())
        server = self._server(st, conn, datasets, after)

        conf = render_ganesha_conf(st) if st.server == "ganesha" else render_exports(st)
        exports = ExportCheck(
            "storage-exports", conn=conn, layer=st, stores=stores,
            triggers={"conf": sha256(conf, 16), "guids": datasets.guids, "mounts": datasets.mounts},
            opts=after(*server))

        nodes = site.slurm_nodes()
        mounts: list[pulumi.Resource] = []
        units = {}
        for n in nodes:
            nconn = site.conn(n)
            prev: list[pulumi.Resource] = [exports]
            if st.client_packages:
                prev = [PackageSet(f"{n.name}-storage-client-packages", conn=nconn,
                                   packages=dict(st.client_packages), hold=True, opts=after(exports))]
            for s in stores:
                d = s.duty
                unit, text = render_mount_unit(st, d, host.address)
                units[d] = text
                # ganesha's FSAL VFS file handles carry the exported mount's device: once a store
                # is mounted again (the pool re-imported, a reboot), every client's handles are
                # stale, so its mounts are made again. Kernel nfsd's handles survive that.
                remount = ({"store": datasets.mounts.apply(functools.partial(_mount_of, s.dataset))}
                           if st.server == "ganesha" else {})
                mounts.append(SystemdUnit(f"{n.name}-{d}-mount", conn=nconn, unit=unit, content=text,
                                          triggers=remount, opts=after(*prev)))
        fstypes = ["fuse.nfsfuse"] if st.client == "fuse-libnfs" else ["nfs", "nfs4"]
        clients = ClientCheck(
            "storage-clients", conn=conn, nodes=[site.conn(n) for n in nodes], stores=stores,
            fstypes=fstypes,
            job_dir=JOB_DIR, guids=datasets.guids, max_parallel=site.ssh.max_parallel,
            triggers={"exports": exports.exported, "units": {d: sha256(t, 16) for d, t in units.items()},
                      "mounts": datasets.mounts},
            opts=after(*mounts))

        def warn(reasons: dict) -> None:
            if reasons:
                pulumi.log.warn("storage: nodes kept out of Slurm:\n" + "\n".join(
                    f"  {n}: {'; '.join(r)}" for n, r in reasons.items()), resource=self)

        clients.reasons.apply(warn)
        datasets.health.apply(lambda h: pulumi.log.warn(
            f"storage: pool {st.pool} is {h}: it still serves, but has lost redundancy (zpool status "
            f"{st.pool})", resource=self) if h and h != "ONLINE" else None)
        self.outputs = StorageOutputs(
            gate=Gate("storage", frozenset(n.name for n in nodes), clients.passed, clients.reasons),
            job_paths=JobPaths(marker=f"{st.models.client_mount}/{MARKER}",
                               job_root=f"{st.data.client_mount}/{JOB_DIR}",
                               readonly_probe=st.models.client_mount),
            datasets=datasets, served=exports, clients=clients,
            models=next(s for s in stores if s.duty == "models"),
            client_mounts=tuple({"path": s.client_mount, "source": s.source, "fstypes": fstypes} for s in stores))
        self.register_outputs({})

    def _server(self, st: StorageLayer, conn: dict, datasets: pulumi.Resource, after) -> list[pulumi.Resource]:
        """The NFS server, after the datasets; its unit refuses to start on an unmounted store."""
        prev: list[pulumi.Resource] = [datasets]
        if st.server_packages:
            prev = [PackageSet("storage-server-packages", conn=conn, packages=dict(st.server_packages),
                               hold=True, opts=after(datasets))]
        check = File("storage-mounted-check", conn=conn, path=MOUNTED_CHECK, mode="0755",
                     content=script_path(__file__, "mounted.sh").read_text(), opts=after(*prev))
        if st.server == "ganesha":
            conf = render_ganesha_conf(st)
            conf_file = File("storage-ganesha-conf", conn=conn, path=GANESHA_CONF, content=conf,
                             opts=after(*prev))
            ready = File("storage-ganesha-ready", conn=conn, path=GANESHA_READY, mode="0755",
                         content=script_path(__file__, "ganesha_ready.sh").read_text(), opts=after(*prev))
            unit = SystemdUnit("storage-nfs-server", conn=conn, unit="nfs-ganesha.service",
                               dropins={"gpu-fleet-mounted.conf": render_ganesha_dropin(st)},
                               triggers={"conf": sha256(conf, 16)}, opts=after(check, conf_file, ready))
            return [unit]
        exports = render_exports(st)
        exports_file = File("storage-exports-file", conn=conn, path=EXPORTS_FILE, content=exports,
                            opts=after(*prev))
        unit = SystemdUnit("storage-nfs-server", conn=conn, unit="nfs-server.service",
                           dropins={"gpu-fleet-mounted.conf": render_nfs_server_dropin(st)},
                           opts=after(check, exports_file))
        reload = CommandWithVerify("storage-exportfs", conn=conn, create=["exportfs", "-ra"],
                                   verify=["exportfs"], triggers={"exports": sha256(exports, 16)}, opts=after(unit))
        return [reload]
