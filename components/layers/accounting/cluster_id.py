"""ClusterID adoption: a controller with state meets an accounting database.

Since Slurm 23.02 slurmctld keeps `<name>|<ClusterID>` in StateSaveLocation's
`clustername` file. A controller that ran without accounting made its own ID;
slurmdbd gives the cluster another when it is registered, and slurmctld then
refuses to start (`CLUSTER ID MISMATCH`) - Slurm guarding shared state. Deleting
the file would silence the guard; the seed's answer, done here between the
cluster's registration and slurmctld's start:

- stop the writer (slurmctld), keep the controller's file next to the accounting
  backups with its SHA-256, and record its ID in the stack;
- take the DBD's registration as authoritative: the file gets the DBD's ID;
- on rollback (layer removed), once slurm.conf no longer names slurmdbd, the kept
  file is checked against its hash and put back; slurmctld reads it at its next
  start (it reads and writes the file only when it starts).

A controller without a file yet (slurmctld takes the DBD's ID itself), one whose
file carries no ID (Slurm before 23.02) or the same ID needs nothing. A file
naming another cluster is refused: that is the name guard, not ours to adopt.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import UpdateResult

from ...errors import FleetError
from ...providers.base import RolloutCheck
from ...providers.parts import Props, _entry, target_of
from ...scripts import script
from ..slurm.render import SLURM_ETC, STATE_SAVE_LOCATION
from ...kit import sh
from ...transport import connection

STATE_FILE = f"{STATE_SAVE_LOCATION}/clustername"
SLURM_CONF = f"{SLURM_ETC}/slurm.conf"

_PROBE = script(__file__, "cluster_id_probe.sh")
_ADOPT = script(__file__, "cluster_id_adopt.sh")
_RESTORE = script(__file__, "cluster_id_restore.sh")


def parse_probe(stdout: str) -> dict[str, Any]:
    """-> {"file": text or None, "sha": ..., "dbd": [ids], or None where the database keeps
    no ClusterIDs, "dbd_error": an error line}."""
    section = None
    out: dict[str, Any] = {"file": None, "sha": None, "dbd": [], "dbd_error": None}
    for line in stdout.splitlines():
        if line.startswith("== "):
            section = line[3:]
            if section == "file":
                out["file"] = ""
            continue
        if section == "file" and line:
            out["file"] = line
        elif section == "sha" and line:
            out["sha"] = line.strip()
        elif section == "dbd" and line.strip():
            if line.strip() == "no-cluster-ids":
                out["dbd"] = None
            elif line.strip().isdigit():
                out["dbd"].append(int(line.strip()))
            else:
                out["dbd_error"] = line.strip()
    if out["file"] is not None and out["sha"] is None:
        out["file"] = None  # no file: the `== file` header alone
    return out


def plan_adoption(cluster: str, file_text: Optional[str], dbd_ids: Optional[list[int]]) -> dict[str, Any]:
    """Pure: what the controller's state and the DBD's registration call for.

    -> {"adopt": bool, "controller_id": int|None, "dbd_id": int|None, "why": str}; raises
    when there is nothing safe to do."""
    if dbd_ids is None:
        if file_text is not None and "|" in file_text:
            raise FleetError(f"cluster {cluster!r}: the controller's state has a ClusterID "
                             f"({file_text.strip()!r}) but the accounting database keeps none: "
                             "slurmdbd is older than slurmctld (Slurm before 23.02)")
        return {"adopt": False, "controller_id": None, "dbd_id": None,
                "why": "the accounting database keeps no ClusterID (Slurm before 23.02)"}
    if len(dbd_ids) != 1:
        raise FleetError(f"cluster {cluster!r}: the accounting database has "
                         f"{'no' if not dbd_ids else len(dbd_ids)} registration(s) for it; "
                         "it must be registered once before slurmctld starts with accounting")
    dbd = dbd_ids[0]
    if file_text is None:
        return {"adopt": False, "controller_id": None, "dbd_id": dbd,
                "why": "no controller state yet: slurmctld takes the DBD's ClusterID"}
    name, sep, ident = file_text.strip().partition("|")
    if name != cluster:
        raise FleetError(f"the controller's state belongs to cluster {name!r}, not {cluster!r} "
                         f"({STATE_FILE}); refusing to adopt another cluster's state")
    if not sep or not ident.strip():
        return {"adopt": False, "controller_id": None, "dbd_id": dbd,
                "why": "the controller's state has no ClusterID (Slurm before 23.02)"}
    if not ident.strip().isdigit():
        raise FleetError(f"{STATE_FILE}: unreadable ClusterID {ident!r}")
    mine = int(ident)
    if mine == dbd:
        return {"adopt": False, "controller_id": mine, "dbd_id": dbd,
                "why": "the controller already has the DBD's ClusterID"}
    return {"adopt": True, "controller_id": mine, "dbd_id": dbd,
            "why": f"CLUSTER ID MISMATCH: controller state {mine}, DBD {dbd}; adopting the DBD's"}


class ClusterIdAdoptionProvider(RolloutCheck):
    """Adopts on create and when triggers change; restores the kept file on delete."""

    rerun_on = ("triggers", "cluster", "database")

    def key(self, props: Props) -> str:
        return "cluster-id"

    def run(self, props: Props) -> dict[str, Any]:
        conn = connection(target_of(props))
        conn.connect()
        probe = conn.run(sh(_PROBE, STATE_FILE, props["database"], props["cluster"]), mutating=False,
                         check=False)
        seen = parse_probe(probe.stdout)
        if seen["dbd_error"]:
            raise FleetError(f"host {conn.t.name}: cannot read the DBD's ClusterID: {seen['dbd_error']}")
        plan = plan_adoption(props["cluster"], seen["file"], seen["dbd"])
        out = {**plan, "kept": None, "kept_sha256": None}
        if plan["adopt"]:
            res = conn.run(sh(_ADOPT, STATE_FILE, f"{props['backup_dir']}/clustername.{plan['controller_id']}",
                              seen["sha"], f"{props['cluster']}|{plan['dbd_id']}"), mutating=True)
            kept = [line.split(" ", 1)[1] for line in res.stdout.splitlines() if line.startswith("kept ")]
            out.update(kept=kept[-1], kept_sha256=seen["sha"])
        return out

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        out = self.run(news)
        if not out["adopt"] and olds.get("kept"):  # an earlier adoption's original stays the one to restore
            out.update(adopt=olds.get("adopt"), controller_id=olds.get("controller_id"),
                       kept=olds["kept"], kept_sha256=olds.get("kept_sha256"))
        return UpdateResult(outs={**news, **out})

    @_entry
    def delete(self, _id: str, props: Props) -> None:
        if not props.get("kept"):
            return
        conn = connection(target_of(props))
        conn.connect()
        conn.run(sh(_RESTORE, STATE_FILE, props["kept"], props["kept_sha256"], SLURM_CONF), mutating=True)


class ClusterIdAdoption(pulumi.dynamic.Resource, module="slurm", name="ClusterIdAdoption"):
    adopt: pulumi.Output[bool]
    controller_id: pulumi.Output[Optional[int]]
    dbd_id: pulumi.Output[int]
    why: pulumi.Output[str]
    kept: pulumi.Output[Optional[str]]

    def __init__(self, name: str, *, conn: dict, cluster: str, database: str, backup_dir: str,
                 triggers: pulumi.Input[dict], opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(ClusterIdAdoptionProvider(), name,
                         {"conn": conn, "cluster": cluster, "database": database, "backup_dir": backup_dir,
                          "triggers": triggers, "adopt": None, "controller_id": None, "dbd_id": None,
                          "why": None, "kept": None, "kept_sha256": None}, opts)
