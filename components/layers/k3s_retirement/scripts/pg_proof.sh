#!/bin/bash
# On a node that runs PostgreSQL: every user database dumped in custom format into $1, each
# dump restored into a scratch database and counted there (user tables, rows per table)
# beside the source, the scratch database dropped again. One JSON line per database:
# {"db", "dump", "source", "restored"} (counts as pg_counts.sh prints them).
# $1 the work directory (removed by the caller once the dumps are shipped), $2 pg_counts.sh.
set -euo pipefail
here="$1"
install -d -m 0700 -o postgres -g postgres -- "$here"
counts_script="$2"
counts() { bash -c "$counts_script" sh "$1"; }
dbs=$(runuser -u postgres -- psql -X -At -v ON_ERROR_STOP=1 -d postgres -c \
  "SELECT datname FROM pg_database WHERE NOT datistemplate AND datname <> 'postgres' AND datname NOT LIKE 'gpufleet_proof_%' ORDER BY 1")
for db in $dbs; do
  dump="$here/$db.dump"; scratch="gpufleet_proof_$db"
  runuser -u postgres -- pg_dump -Fc -f "$dump" -- "$db"
  src=$(counts "$db")
  runuser -u postgres -- dropdb --if-exists -- "$scratch"
  runuser -u postgres -- createdb -- "$scratch"
  runuser -u postgres -- pg_restore --no-owner --exit-on-error -d "$scratch" -- "$dump"
  got=$(counts "$scratch")
  runuser -u postgres -- dropdb -- "$scratch"
  printf '{"db": "%s", "dump": "%s", "source": %s, "restored": %s}\n' "$db" "$dump" "$src" "$got"
done
