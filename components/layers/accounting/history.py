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
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult
from pulumi.dynamic import Resource

from ...errors import FleetError
from ...providers.base import Props, _entry, target_of
from ...transport import connection

# A fingerprint of database $1: "tables N", "jobs <table> <rows> <max id>", "sum <table> <checksum>".
_FINGERPRINT = r"""
fingerprint() {
  mariadb -N -B -e "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='$1'" \
    | sed 's/^/tables /'
  for t in $(mariadb -N -B -e "SELECT table_name FROM information_schema.tables
                               WHERE table_schema='$1' ORDER BY table_name"); do
    case $t in *_job_table)
      mariadb -N -B -e "SELECT '$t', COUNT(*), COALESCE(MAX(id_job), 0) FROM \`$1\`.\`$t\`" \
        | sed 's/^/jobs /';;
    esac
    mariadb -N -B -e "CHECKSUM TABLE \`$1\`.\`$t\`" | awk -v t="$t" '{print "sum", t, $2}'
  done
}
"""

# $1 database, $2 backup directory. Prints "key value" lines; exit 3 = proof failed.
_BACKUP = r"""
set -euo pipefail
db="$1"; dir="$2"
""" + _FINGERPRINT + r"""
refuse() { echo "refused $*"; mariadb -e "DROP DATABASE IF EXISTS \`$scratch\`" || true; exit 3; }
scratch="${db}_gpu_fleet_proof"
# 1. no new writers
systemctl stop slurmdbd.service 2>/dev/null || true
if systemctl is-active -q slurmdbd.service; then echo "refused slurmdbd is still running"; exit 3; fi
if ! mariadb -N -B -e "SHOW DATABASES" | grep -qx "$db"; then echo "absent $db"; exit 0; fi
# 2. the dump, hashed as it is written
install -d -m 0700 "$dir"
f="$dir/$db-$(date -u +%Y%m%dT%H%M%SZ).sql.gz"
stream=$(mariadb-dump --single-transaction --routines "$db" | gzip -c | tee "$f.part" \
         | sha256sum | cut -d' ' -f1)
echo "dump $f"
# 3. the file on disk is the stream, and a whole gzip stream
gzip -t "$f.part" 2>/dev/null || refuse "the dump $f is not a valid gzip stream"
disk=$(sha256sum "$f.part" | cut -d' ' -f1)
[ "$disk" = "$stream" ] || refuse "the dump $f on disk has SHA-256 $disk, the stream written was $stream"
mv -f "$f.part" "$f"
echo "$stream  $(basename "$f")" > "$f.sha256"
echo "sha256 $stream"
# 4. restore into a scratch database
mariadb -e "DROP DATABASE IF EXISTS \`$scratch\`; CREATE DATABASE \`$scratch\`"
gunzip -c "$f" | mariadb "$scratch" 2>"$dir/.restore.err" \
  || refuse "the dump $f does not restore: $(head -c 300 "$dir/.restore.err")"
# 5. compare schema, job rows and table checksums with the source
fingerprint "$db" > "$dir/.source"; fingerprint "$scratch" > "$dir/.scratch"
if ! diff -u "$dir/.source" "$dir/.scratch" > "$dir/.diff"; then
  refuse "the restored copy differs from the source: $(grep '^[-+][a-z]' "$dir/.diff" | head -n 6 | tr '\n' ';')"
fi
sed 's/^/source /' "$dir/.source" | grep -E '^source (tables|jobs) '
# the proven fingerprint goes with the dump: a reapply checks its restore against it
mv -f "$dir/.source" "$f.fingerprint"
rm -f "$dir/.scratch" "$dir/.diff" "$dir/.restore.err"
# 6. proven: remove the scratch copy and the active database
mariadb -e "DROP DATABASE \`$scratch\`; DROP DATABASE \`$db\`"
echo "dropped $db"
"""

# $1 database, $2 backup directory. Restores the newest dump into an empty database.
_RESTORE = r"""
set -euo pipefail
db="$1"; dir="$2"
""" + _FINGERPRINT + r"""
empty() { mariadb -e "DROP DATABASE IF EXISTS \`$db\`; CREATE DATABASE \`$db\`"; }
n=$(mariadb -N -B -e "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='$db'")
if [ "$n" != 0 ]; then echo "kept $db has $n tables"; exit 0; fi
f=$(ls -1 "$dir"/"$db"-*.sql.gz 2>/dev/null | sort | tail -n 1 || true)
if [ -z "$f" ]; then echo "fresh no dump in $dir"; exit 0; fi
[ -f "$f.sha256" ] || { echo "refused $f has no recorded SHA-256 ($f.sha256)"; exit 3; }
want=$(cut -d' ' -f1 "$f.sha256"); have=$(sha256sum "$f" | cut -d' ' -f1)
[ "$want" = "$have" ] || { echo "refused $f has SHA-256 $have, the backup recorded $want"; exit 3; }
gzip -t "$f" 2>/dev/null || { echo "refused $f is not a valid gzip stream"; exit 3; }
if ! gunzip -c "$f" | mariadb "$db" 2>"$dir/.restore.err"; then
  empty; echo "refused $f does not restore: $(head -c 300 "$dir/.restore.err")"; exit 3
fi
rm -f "$dir/.restore.err"
# the restored history must be what the backup proved (same tables, job rows, checksums)
if [ -f "$f.fingerprint" ] && ! fingerprint "$db" | diff -q - "$f.fingerprint" >/dev/null; then
  empty; echo "refused the history restored from $f differs from the one its backup proved"; exit 3
fi
echo "restored $f"
echo "sha256 $have"
mariadb -N -B -e "SELECT table_name FROM information_schema.tables WHERE table_schema='$db'
                  AND table_name LIKE '%\_job\_table'" | while read -r t; do
  mariadb -N -B -e "SELECT 'jobs', '$t', COUNT(*) FROM \`$db\`.\`$t\`"
done
"""


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


class AccountingHistoryProvider(ResourceProvider):
    """Restore on create, proven backup on delete; nothing on refresh or a no-op up."""

    @_entry
    def create(self, props: Props) -> CreateResult:
        conn = connection(target_of(props))
        res = conn.run(["bash", "-c", _RESTORE, "bash", props["database"], props["backup_dir"]],
                       mutating=True, check=False)
        got = parse_lines(res.stdout)
        if res.rc != 0:
            why = got.get("refused") or (res.stdout + res.stderr).strip()[-500:]
            raise FleetError(f"host {conn.t.name}: refusing to start accounting on an empty database "
                             f"{props['database']!r} from a damaged backup: {why}")
        return CreateResult(id_=f"{conn.t.name}:{props['database']}", outs={
            **props, "restored_from": got.get("restored"), "restored_sha256": got.get("sha256"),
            "restored_jobs": got["jobs"]})

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        moved = [k for k in ("database", "backup_dir") if olds.get(k) != news.get(k)]
        if olds.get("conn", {}).get("name") != news["conn"]["name"]:
            moved.append("conn")
        return DiffResult(changes=bool(moved), replaces=moved, stables=[], delete_before_replace=True)

    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        return UpdateResult(outs={**olds, **news})

    def read(self, id_: str, props: Props) -> ReadResult:
        return ReadResult(id_=id_, outs=props)

    @_entry
    def delete(self, _id: str, props: Props) -> None:
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

