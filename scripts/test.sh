#!/usr/bin/env bash
# The test command: lint and type check, then unit, mock and integration tests (the last with the
# real Pulumi CLI). Arguments go to pytest and run that subset only, without the two checks.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv/bin/python ] || [ ! -x .tools/bin/pulumi ]; then echo "run 'make setup' first" >&2; exit 1; fi

# check NAME COMMAND...: run it and say how long it took; a finding stops `make test` here.
check() {
  local name="$1" start="$EPOCHREALTIME"
  shift
  if ! "$@"; then
    echo "make test: $name found problems (listed above); the tests did not run" >&2
    exit 1
  fi
  LC_ALL=C awk -v a="$start" -v b="$EPOCHREALTIME" -v n="$name" 'BEGIN { printf "%s: clean in %.1f s\n", n, b - a }'
}

if [ $# -eq 0 ]; then
  # both pinned in requirements.txt; ruff.toml and mypy.ini say what they check
  # cache, .mypy_cache, makes a warm run take seconds)
  check "ruff check" .venv/bin/ruff check .
  # mypy's cache machine-wide, like the other tools' builds: a clean checkout (CI) starts warm
  # (it revalidates each module by its source's hash; cold 17-25 s, warm about 1 s here)
  cache="${GPU_FLEET_TOOL_CACHE:-/var/cache/gpu-fleet}"
  { mkdir -p "$cache/mypy" && [ -w "$cache/mypy" ]; } 2>/dev/null || cache="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-fleet"
  check mypy env MYPY_CACHE_DIR="$cache/mypy/$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
    .venv/bin/mypy
fi
if [ $# -gt 0 ]; then exec .venv/bin/python -m pytest "$@"; fi

# The lab tests spend most of their wall time waiting on the lab's hosts (daemons, Slurm's
# scheduling cycles, SSH) with CPU to spare; the rest of the suite is CPU-bound Python and the
# real CLI on this machine only. So as root the lab tests run on two labs at once
# (GPU_FLEET_LAB_SHARDS=N: N labs), each module on one of them (tests/lab/shards.py;
# the other labs: scripts/lab-ns.sh), and the rest runs beside them; the reports follow each
# other, the first lab's as it runs. Any part failing fails `make test`.
# GPU_FLEET_LAB_SHARDS=1: one lab runs every lab test. A third lab does not pay on 2 cores: with
# three, the machine was 94 % busy and each lab half done after 27 min (two: all done in 31).
tmp="$(mktemp -d "${TMPDIR:-/tmp}/gf-test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# The offline suite runs niced: it is a quarter of the labs' length, and the machine idles in
# the labs' waits (22 % of a CI run); at equal priority it took a core from them while both were
# busiest (the first ten minutes, 95-98 % busy).
nice -n 10 .venv/bin/python -m pytest tests/unit tests/mock tests/policy tests/integration >"$tmp/offline.log" 2>&1 &
offline=$!
labs=1
if [ "$(id -u)" -eq 0 ]; then labs="${GPU_FLEET_LAB_SHARDS:-2}"; fi
case "$labs" in [1-9]) ;; *) echo "GPU_FLEET_LAB_SHARDS must be 1 to 9 (got $labs)" >&2; exit 2 ;; esac
pids=()
for ((k = 2; k <= labs; k++)); do
  GPU_FLEET_LAB_SHARD="$k/$labs" scripts/lab-ns.sh "$k" .venv/bin/python -m pytest tests/lab >"$tmp/lab$k.log" 2>&1 &
  pids[k]=$!
done
rcs=()
rcs[1]=0
GPU_FLEET_LAB_SHARD="1/$labs" .venv/bin/python -m pytest tests/lab || rcs[1]=$?
for ((k = 2; k <= labs; k++)); do
  rcs[k]=0
  wait "${pids[k]}" || rcs[k]=$?
  echo
  echo "======== tests/lab on lab $k (ran beside the first) ========"
  cat "$tmp/lab$k.log"
done
offline_rc=0
wait "$offline" || offline_rc=$?
echo
echo "======== tests/unit tests/mock tests/policy tests/integration (ran beside tests/lab) ========"
cat "$tmp/offline.log"
ok=$((offline_rc == 0))
summary=""
for ((k = 1; k <= labs; k++)); do
  summary+=" ${rcs[k]} on lab $k,"
  [ "${rcs[k]}" -eq 0 ] || ok=0
done
echo "make test: tests/lab exited$summary tests/unit, mock, policy and integration exited $offline_rc"
[ "$ok" -eq 1 ]
