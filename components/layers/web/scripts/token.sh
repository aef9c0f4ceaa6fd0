#!/bin/bash
# Installed on the controller as the token timer's job: mints a slurmrestd token for the
# low-privilege Slurm user $1, valid $2 seconds, and swaps it into file $3 (0440, group $4,
# the containers' gid) in one rename, so the agent never reads half a token. Prints no token.
set -euo pipefail
user=$1 life=$2 file=$3 gid=$4
dir=$(dirname "$file")
install -d -m 0750 -o root -g "$gid" "$dir"
out=$(scontrol token username="$user" lifespan="$life")
tok=${out#SLURM_JWT=}
if [ "$tok" = "$out" ] || [ -z "$tok" ]; then
  echo "scontrol token username=$user printed no SLURM_JWT= line" >&2
  exit 1
fi
tmp=$(mktemp "$dir/.token.XXXXXX")
printf '%s' "$tok" >"$tmp"
chown "root:$gid" "$tmp"
chmod 0440 "$tmp"
mv -f "$tmp" "$file"
echo "minted a token for $user valid ${life}s into $file"
