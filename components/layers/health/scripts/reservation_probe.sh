#!/bin/sh
# Reads one Slurm reservation on the controller: `scontrol show reservation -o` (or `absent`), then
# `== hostnames` and its nodes one a line, expanded by Slurm itself (`scontrol show hostnames`).
# $1: the reservation's name.
set -u
if ! out=$(scontrol show reservation -o "$1" 2>&1); then
  case "$out" in
    *"not found"*|*"No reservations"*) echo absent; exit 0 ;;
    *) echo "$out" >&2; exit 1 ;;
  esac
fi
echo "$out"
nodes=$(printf '%s\n' "$out" | sed -n 's/.* Nodes=\([^ ]*\) .*/\1/p')
echo "== hostnames"
case "$nodes" in ''|'(null)') ;; *) scontrol show hostnames "$nodes" ;; esac
