"""Validate a new slurm.conf in isolation before any live daemon reads it.

Slurm 22.05 has no configuration test mode, so the controller's copy is proven
the way the seed did it: a throw-away `slurmctld -D` started on the candidate
file, with its own port, state, pid and log under a private temp directory.
The file passes once that daemon says "Running as primary controller"; it fails
if the daemon exits first (a bad plugin, an unknown key, a malformed node line)
and its own log is the error. The accounting lines (storage, gathering, the JWT
AuthAlt) are dropped from the copy: the test daemon must never register with
slurmdbd, and the JWT key may not exist yet when the config is first written
(the accounting layer installs it); the rest of the file is what is validated.
The live slurmctld, its state and its port are never touched.

Used as the `validate` hook of the controller's slurm.conf File: the candidate
is validated in the temp file the File wrote, before it is renamed into place,
and node copies are written only after the controller's copy validated.
"""

from __future__ import annotations

VALIDATE_PORT = 16817  # the live controller keeps 6817
VALIDATE_TIMEOUT_S = 60

_VALIDATE = r"""
set -u
new="$1"; port="$2"; limit="$3"; etc=$(dirname -- "$4")
d=$(mktemp -d /run/gpu-fleet-slurmconf.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf -- "$d"
}
trap cleanup EXIT
# SlurmUser must reach its state directory inside the (0700) temp directory
chmod 0711 "$d" && mkdir -p -- "$d/state" && chown slurm: "$d/state" || exit 1
for f in cgroup.conf gres.conf; do [ -f "$etc/$f" ] && cp -- "$etc/$f" "$d/"; done
sed -e "s|^SlurmctldPort=.*|SlurmctldPort=$port|" \
    -e "s|^StateSaveLocation=.*|StateSaveLocation=$d/state|" \
    -e "s|^SlurmctldPidFile=.*|SlurmctldPidFile=$d/slurmctld.pid|" \
    -e "s|^SlurmctldLogFile=.*|SlurmctldLogFile=$d/slurmctld.log|" \
    -e '/^AccountingStorage/d' -e '/^JobAcctGather/d' -e '/^AuthAlt/d' -- "$new" > "$d/slurm.conf"
chmod 0644 "$d/slurm.conf"
SLURM_CONF="$d/slurm.conf" slurmctld -D -f "$d/slurm.conf" > "$d/out" 2>&1 &
pid=$!
i=0
while [ "$i" -lt $((limit * 5)) ]; do
  if grep -qs "Running as primary controller" "$d/slurmctld.log" "$d/out"; then
    echo "slurm.conf validated: a test slurmctld on port $port took it"; exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"; rc=$?; pid=
    echo "slurm.conf refused: a test slurmctld on this file exited $rc:" >&2
    cat "$d/out" "$d/slurmctld.log" 2>/dev/null | grep -v 'pmix' | tail -n 20 >&2
    exit 1
  fi
  sleep 0.2; i=$((i + 1))
done
echo "slurm.conf not validated: a test slurmctld did not come up within $limit s:" >&2
tail -n 20 "$d/slurmctld.log" "$d/out" >&2 2>/dev/null
exit 1
"""


def validate_argv(live_path: str, port: int = VALIDATE_PORT,
                  timeout_s: int = VALIDATE_TIMEOUT_S) -> list[str]:
    """The File `validate` argv for the controller's slurm.conf (`{}` is the candidate)."""
    return ["sh", "-c", _VALIDATE, "sh", "{}", str(port), str(timeout_s), live_path]
