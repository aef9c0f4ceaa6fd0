#!/bin/bash
# Restores the newest proven dump into an empty accounting database; a database with tables is kept.
# $1 database, $2 backup directory. Prints "key value" lines; exit 3 = refused (database left empty).
# Runs after history_fingerprint.sh (fingerprint()).

set -euo pipefail
db="$1"; dir="$2"

empty() { mariadb -e "DROP DATABASE IF EXISTS \`$db\`; CREATE DATABASE \`$db\`"; }
n=$(mariadb -N -B -e "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='$db'")
if [ "$n" != 0 ]; then echo "kept $db has $n tables"; exit 0; fi
# the newest dump (the glob sorts the UTC stamps in the names)
f=
for g in "$dir"/"$db"-*.sql.gz; do if [ -e "$g" ]; then f=$g; fi; done
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
