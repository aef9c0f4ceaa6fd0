#!/bin/sh
# Reads an account: the passwd and group entries of a name, and who holds a uid and a gid.
# $1 user/group name, $2 uid, $3 gid. Prints "user|group|uid|gid <getent line>" lines.

echo "user $(getent passwd "$1")"
echo "group $(getent group "$1")"
echo "uid $(getent passwd "$2")"
echo "gid $(getent group "$3")"
