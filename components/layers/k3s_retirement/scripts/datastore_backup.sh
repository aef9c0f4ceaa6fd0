#!/bin/bash
# On the K3s server: an online backup of the SQLite datastore (SQLite's backup API, as
# `sqlite3 .backup` uses; never a file copy of a live database) into $2, then its integrity
# check. Prints `integrity <result>` and `tables <n>`. $1 the datastore, $2 the backup file.
set -euo pipefail
umask 077
[ -f "$1" ] || { echo "no datastore at $1" >&2; exit 3; }
mkdir -p -- "$(dirname -- "$2")"
rm -f -- "$2"
python3 - "$1" "$2" <<'PY'
import sqlite3, sys
src = sqlite3.connect(sys.argv[1], timeout=30)
dst = sqlite3.connect(sys.argv[2])
src.backup(dst)
print("integrity", dst.execute("PRAGMA integrity_check").fetchone()[0])
print("tables", dst.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0])
dst.close(); src.close()
PY
