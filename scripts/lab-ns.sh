#!/usr/bin/env bash
# Another lab beside the first (`make test` deals the lab test modules out over several,
# scripts/test.sh): `scripts/lab-ns.sh N COMMAND` runs COMMAND for lab N (2, 3, ...) from a copy
# of this tree, in a network namespace of its own, with GPU_FLEET_LAB_NAME=gpu-fleet-labN.
# E.g. `scripts/lab-ns.sh 2 .venv/bin/python -m lab status` (or `down`).
#
# The copy (.state/labN/tree: every file git would commit, as this tree has it now) has its own
# .state: lab hosts, inventory, key, stack backends. The namespace has its own bridge with the
# same name and addresses as the first lab's, so the committed lab stack file and the tests'
# addresses hold in every lab and no two labs reach each other. Only the network namespace is
# entered (nsenter --net): `ip netns exec` would also mount a new /sys, without this machine's
# cgroup hierarchies, which the lab's hosts boot in. The image and package repository come from
# the machine-wide cache, prepared here first, where the mirrors are reachable.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

usage="usage: scripts/lab-ns.sh N COMMAND [ARGS...]   (N: the lab's number, 2 or more)"
[ $# -gt 1 ] || { echo "$usage" >&2; exit 2; }
case "$1" in [2-9] | [1-9][0-9]) ;; *) echo "$usage" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "lab-ns.sh: the lab needs root" >&2; exit 1; }
NAME="gpu-fleet-lab$1"
TREE="$ROOT/.state/lab$1/tree"
shift
.venv/bin/python -m lab prepare

mkdir -p "$TREE"
find "$TREE" -mindepth 1 -maxdepth 1 ! -name .state -exec rm -rf {} +
# --ignore-failed-read: a tracked file deleted in this tree (not committed yet) is not copied
git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$TREE"
ln -s "$ROOT/.venv" "$TREE/.venv"
ln -s "$ROOT/.tools" "$TREE/.tools"

[ -e "/run/netns/$NAME" ] || ip netns add "$NAME"
ip -n "$NAME" link set lo up

cd "$TREE"
rc=0
nsenter --net="/run/netns/$NAME" -- env GPU_FLEET_LAB_NAME="$NAME" "$@" || rc=$?
# the namespace goes when its lab is down (kept with the lab: GPU_FLEET_LAB_KEEP=1)
if [ ! -e .state/lab/inventory.json ]; then ip netns del "$NAME" 2>/dev/null || true; fi
exit "$rc"
