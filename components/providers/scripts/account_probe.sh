#!/bin/sh
# Reads an account: the passwd entries of a name and of a uid, the group entries of the name
# and of a gid, two getent calls in all (each prints the entry of every key it finds; the
# parser tells them apart by name and id). $1 user/group name, $2 uid, $3 gid.

echo "== passwd"
getent passwd "$1" "$2" || :
echo "== group"
getent group "$1" "$3" || :
