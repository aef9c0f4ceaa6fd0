#!/bin/bash
# Waits until Slurm-web in container $1 answers $2 (asked from inside it: the agent has no port
# on the host), at most $3 seconds. Installed on the controller, the gateway's unit runs it for the
# agent before starting (Slurm-web's gateway keeps what it learnt of its agents for 300 s, a failure
# too); the layer runs it after (re)starting either container (running is not yet serving).
set -uo pipefail
name=$1 url=$2 limit=$3
# by the clock, not by tries: a podman exec into a container still starting takes a second or more
end=$((SECONDS + limit))
while [ "$SECONDS" -lt "$end" ]; do
  if podman exec "$name" python3 -I -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=2)' "$url" \
      >/dev/null 2>&1; then
    exit 0
  fi
  sleep 1
done
echo "Slurm-web in $name did not answer $url within ${limit}s" >&2
exit 1
