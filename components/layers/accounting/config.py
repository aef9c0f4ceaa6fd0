"""The accounting layer's config: MariaDB, slurmdbd and slurmrestd on the controller."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Optional

from pydantic import Field, IPvAnyNetwork

from ...config.project import PROJECT
from ...config.types import DebianVersion, RemotePath, SqlName, Strict, UserName, is_ip

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


class AccountingLayer(Strict):
    """MariaDB + slurmdbd + slurmrestd on the controller (the seed's storage server)."""

    enabled: bool = False
    database: SqlName = "slurm_acct_db"
    db_user: SqlName = "slurm"
    mariadb_version: Optional[DebianVersion] = None
    #: the nftables package for slurmdbd's firewall; unset: the host must already have `nft`
    nftables_version: Optional[DebianVersion] = None
    datadir: RemotePath = "/srv/gpu-fleet/mariadb"
    #: where a rollback keeps its proven dumps (outside the datadir, which rollback removes)
    backup_dir: RemotePath = "/srv/gpu-fleet/backup/accounting"
    restd_user: UserName = "slurmrestd"
    restd_uid: int = Field(64201, ge=1000, le=2**31)
    #: who else may reach slurmdbd's port besides loopback, the controller and every node
    #: given by IP address: the compute network's or the login nodes' CIDRs
    dbd_clients: list[IPvAnyNetwork] = Field(default_factory=list)




def check(cfg: FleetConfig) -> list[str]:
    """Dumps kept outside what rollback removes; every node admissible to slurmdbd's firewall."""
    problems: list[str] = []
    a = cfg.accounting
    backup, data = PurePosixPath(a.backup_dir), PurePosixPath(a.datadir)
    if backup == data or data in backup.parents:
        problems.append(f"{PROJECT}:accounting.backup_dir: {a.backup_dir} is inside accounting.datadir "
                        f"({a.datadir}), which rollback removes once the dump is proven; keep the "
                        "dumps outside it")
    if a.enabled and not a.dbd_clients:
        for i, n in enumerate(cfg.nodes):
            if not is_ip(n.address):
                problems.append(
                    f"{PROJECT}:nodes[{i}] ({n.name}).address: {n.address!r} is a DNS name, so "
                    "slurmdbd's firewall cannot admit it by address; list the compute network in "
                    "accounting.dbd_clients")
    return problems
