#!/bin/bash
# Backs up the accounting database, proves the dump restores identically, and only then drops it.
# $1 database, $2 backup directory. Prints "key value" lines; exit 3 = proof failed (database untouched).
# Runs after history_fingerprint.sh (fingerprint()).

set -euo pipefail
db="$1"; dir="$2"

refuse() { echo "refused $*"; mariadb -e "DROP DATABASE IF EXISTS \`$scratch\`" || true; exit 3; }
scratch="${db}_gpu_fleet_proof"
# 1. no new writers
systemctl stop slurmdbd.service 2>/dev/null || true
if systemctl is-active -q slurmdbd.service; then echo "refused slurmdbd is still running"; exit 3; fi
# (captured first: a failed listing refuses, and grep -q cannot cut a producer short)
dbs=$(mariadb -N -B -e "SHOW DATABASES") || refuse "mariadb did not list its databases"
if ! grep -qxF -- "$db" <<<"$dbs"; then echo "absent $db"; exit 0; fi
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
