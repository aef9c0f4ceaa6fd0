#!/bin/sh
# The workload's places on the data store, on the storage host: the runtime's directory (root's,
# read by all) and the runs' and releases' directories, which the workload's user writes and
# only an owner may rename from (mode 1777, as the store's own data directories).
# $1 the runtime directory, $2 the runs directory, $3 the releases directory.
set -eu
mkdir -p "$1" "$2" "$3"
chmod 0755 "$1"
chmod 1777 "$2" "$3"
