#!/bin/bash
# Read-only, on the K3s server: the token's SHA-256 and the datastore's integrity, to compare
# with the bundle before K3s starts again. $1 the datastore, $2 the token file.
echo "== token"; sha256sum -- "$2" 2>/dev/null | cut -d' ' -f1
echo "== datastore"
[ -f "$1" ] || { echo missing; exit 0; }
python3 - "$1" <<'PY' 2>&1
import sqlite3, sys
try:
    print(sqlite3.connect(sys.argv[1], timeout=30).execute("PRAGMA integrity_check").fetchone()[0])
except Exception as e:
    print("unreadable", e)
PY
