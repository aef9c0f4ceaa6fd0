"""Accounting history: a rollback removes the database only after a restore proved the backup.

The seed's seven steps (备份要证明能恢复), as the delete of `AccountingHistory`,
which sits between the database and slurmdbd, so Pulumi stops slurmdbd before
it and removes MariaDB after it:

1. stop new accounting writers (slurmdbd, the only one that writes the database;
   slurmctld queues its records for slurmdbd) and check it is stopped;
2. a timestamped SQL dump, compressed, its SHA-256 taken from the stream as written;
3. verify the compressed file (gzip -t) and that its SHA-256 is the stream's;
4. import it into a scratch database;
5. compare the scratch copy with the source: table count, rows and max job id of
   every cluster's job table, and a checksum of every table;
6. only after that proof drop the active database (the scratch copy goes too);
7. on reapply (`create`), verify the dump's hash and compressed stream before its
   history is restored into the empty database, before slurmdbd starts, and check
   the restored database against the fingerprint the backup proved (kept next to
   the dump); a restore that fails or differs leaves the database empty and stops.

Any failed step leaves the active database untouched and fails the rollback
with the reason; the dump stays under `backup_dir` either way. A database that
already has tables is never overwritten by a restore.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from ...errors import FleetError
from ...providers.parts import Props, target_of
from ...providers.undoable import ActionWithUndo
from ...scripts import script
from ...transport import connection

_FINGERPRINT = script(__file__, "history_fingerprint.sh")  # defines fingerprint()
_BACKUP = _FINGERPRINT + script(__file__, "history_backup.sh")
_RESTORE = _FINGERPRINT + script(__file__, "history_restore.sh")


def parse_lines(stdout: str) -> dict[str, Any]:
    """'key value' lines -> {key: value}; 'jobs <table> <rows> ...' lines -> {'jobs': {table: rows}}."""
    out: dict[str, Any] = {"jobs": {}}
    for line in stdout.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] in ("jobs", "source") and "jobs" in words[:2]:
            w = words[words.index("jobs") + 1:]
            if len(w) >= 2 and w[1].isdigit():
                out["jobs"][w[0]] = int(w[1])
        else:
            out[words[0]] = line[len(words[0]):].strip()
    return out


class AccountingHistoryProvider(ActionWithUndo):
    """Restore on create, proven backup on delete; nothing on refresh or a no-op up."""

    #: another database or backup dir is another object: delete dumps and drops the one recorded
    replace_on = ("database", "backup_dir")
    act_on_update = False

    def id_of(self, props: Props) -> str:
        return f"{target_of(props).name}:{props['database']}"

    def act(self, props: Props) -> Props:
        conn = connection(target_of(props))
        res = conn.run(["bash", "-c", _RESTORE, "bash", props["database"], props["backup_dir"]],
                       mutating=True, check=False)
        got = parse_lines(res.stdout)
        if res.rc != 0:
            why = got.get("refused") or (res.stdout + res.stderr).strip()[-500:]
            raise FleetError(f"host {conn.t.name}: refusing to start accounting on an empty database "
                             f"{props['database']!r} from a damaged backup: {why}")
        return {"restored_from": got.get("restored") or "", "restored_sha256": got.get("sha256") or "",
                "restored_jobs": got["jobs"]}

    def observe(self, props: Props) -> Props:
        """Nothing restored is "" in state, never null: the engine drops a null output, and a
        preview then reads the missing value as unknown, so the cluster-ID adoption, whose
        triggers hold it, showed an update on every preview of a fleet that restored nothing.
        Refresh turns an older state's null into "" (it reads no host)."""
        return {k: props.get(k) or "" for k in ("restored_from", "restored_sha256")}

    def undo(self, props: Props) -> None:
        conn = connection(target_of(props))
        res = conn.run(["bash", "-c", _BACKUP, "bash", props["database"], props["backup_dir"]],
                       mutating=True, check=False, timeout=3600)
        got = parse_lines(res.stdout)
        if res.rc != 0 or ("dropped" not in got and "absent" not in got):
            why = got.get("refused") or (res.stdout + res.stderr).strip()[-800:]
            raise FleetError(
                f"host {conn.t.name}: refusing to remove the accounting database {props['database']!r}: "
                f"{why}. The database is untouched (slurmdbd is stopped)"
                + (f"; the dump is at {got['dump']}" if got.get("dump") else ""))


class AccountingHistory(Resource, module="slurm", name="AccountingHistory"):
    """The accounting database's history across rollback and reapply (see the module doc)."""

    restored_from: pulumi.Output[Optional[str]]
    restored_jobs: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, database: str, backup_dir: str,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(AccountingHistoryProvider(), name,
                         {"conn": conn, "database": database, "backup_dir": backup_dir,
                          "restored_from": None, "restored_sha256": None, "restored_jobs": None},
                         opts)

