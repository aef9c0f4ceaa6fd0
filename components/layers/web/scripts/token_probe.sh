#!/bin/bash
# Read-only: the agent's settings $1 are there (0440 root:$3), hold the template $5 with a token
# in place of its mark, and the token names Slurm user $2 with at least $4 seconds left. Prints
# the file's owner, mode and the JWT's claims (never the token); exit 1 when any of that is not so.
set -uo pipefail
file=$1 user=$2 gid=$3 min_left=$4 template=$5
if [ ! -f "$file" ]; then echo "no agent settings $file"; exit 1; fi
read -r mode owner group < <(stat -c '%a %u %g' "$file")
tok=$(sed -n 's/^jwt_token=//p' "$file")
if ! diff -q <(sed 's/^jwt_token=.*/jwt_token=@SLURM_JWT@/' "$file") "$template" >/dev/null; then
  echo "$file is not $template with a token: the template changed since it was written"; exit 1
fi
payload=$(printf '%s' "$tok" | cut -d. -f2 | tr '_-' '/+')
while [ $(( ${#payload} % 4 )) -ne 0 ]; do payload="$payload="; done
claims=$(printf '%s' "$payload" | base64 -d 2>/dev/null | tr -d '\n')
exp=$(printf '%s' "$claims" | sed -n 's/.*"exp":\([0-9]*\).*/\1/p')
sun=$(printf '%s' "$claims" | sed -n 's/.*"sun":"\([^"]*\)".*/\1/p')
now=$(date +%s)
echo "mode $mode owner $owner group $group sun $sun exp $exp now $now"
if [ "$mode" != 440 ] || [ "$owner" != 0 ] || [ "$group" != "$gid" ]; then
  echo "agent settings: want 0440 0:$gid"; exit 1
fi
if [ "$sun" != "$user" ]; then echo "token is for '$sun', not $user"; exit 1; fi
left=$(( ${exp:-0} - now ))
if [ "$left" -lt "$min_left" ]; then echo "token expires in ${left}s (< ${min_left}s)"; exit 1; fi
