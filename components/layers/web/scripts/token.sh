#!/bin/bash
# Installed on the controller as the token timer's job: mints a slurmrestd token for the
# low-privilege Slurm user $1, valid $2 seconds, and writes the agent's settings $4 from the
# template $3 with the token in place of @SLURM_JWT@ (0440, group $5, the containers' gid), in one
# rename, so the agent never reads half a file. Slurm-web's agent reads its settings when it
# starts: the units that follow ($7..., the agent's, then the gateway's, which forgets what it
# learnt of the agent only when it restarts) are restarted, when running, under the layer's lock
# $6. Prints no token.
set -euo pipefail
user=$1 life=$2 template=$3 file=$4 gid=$5 lock=$6
shift 6
dir=$(dirname "$file")
install -d -m 0750 -o root -g "$gid" "$dir"
out=$(scontrol token username="$user" lifespan="$life")
tok=${out#SLURM_JWT=}
if [ "$tok" = "$out" ] || [ -z "$tok" ] || [[ ! "$tok" =~ ^[A-Za-z0-9._-]+$ ]]; then
  echo "scontrol token username=$user printed no SLURM_JWT= line of a JWT" >&2
  exit 1
fi
if ! grep -q '^jwt_token=@SLURM_JWT@$' "$template"; then
  echo "$template has no jwt_token=@SLURM_JWT@ line" >&2
  exit 1
fi
tmp=$(mktemp "$dir/.agent.ini.XXXXXX")
sed "s|^jwt_token=@SLURM_JWT@\$|jwt_token=$tok|" "$template" >"$tmp"
chown "root:$gid" "$tmp"
chmod 0440 "$tmp"
mv -f "$tmp" "$file"
echo "minted a token for $user valid ${life}s into $file"
exec 9>"$lock"
flock -w 120 9
for unit in "$@"; do
  if systemctl -q is-active "$unit"; then
    systemctl restart "$unit"
    echo "restarted $unit"
  fi
done
