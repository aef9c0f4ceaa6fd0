#!/bin/sh
# Submits the workload pipeline as its user, from the controller: P0, then the render with
# afterok:P0, the assembly with afterok:render, the QA with afterok:assembly, each with
# --kill-on-invalid-dep=yes (a failed step cancels what depends on it). Later jobs find the run
# by GF_RUN (P0's id); the QA job names the release by the render job's id (GF_FILM_JOB).
# $1 the user, $2 the directory of the batch scripts (p0, render, assemble, qa).
# Prints `p0=<id> render=<id> assemble=<id> qa=<id>`.
set -eu
user=$1 dir=$2
cd /tmp
# the chain's variables travel in the submitting environment (sbatch's default --export=ALL):
# `--export=ALL,VAR=...` would make slurmd load the user's login environment (su -l) first
submit() {
  id=$(runuser -u "$user" -- env "$@") || exit
  echo "${id%%;*}"
}
p0=$(submit sbatch --parsable "$dir/p0")
chain="--kill-on-invalid-dep=yes"
# shellcheck disable=SC2086  # $chain: options without blanks
render=$(submit GF_RUN="$p0" sbatch --parsable --dependency="afterok:$p0" $chain "$dir/render")
# shellcheck disable=SC2086
assemble=$(submit GF_RUN="$p0" sbatch --parsable --dependency="afterok:$render" $chain "$dir/assemble")
# shellcheck disable=SC2086
qa=$(submit GF_RUN="$p0" GF_FILM_JOB="$render" sbatch --parsable --dependency="afterok:$assemble" $chain "$dir/qa")
echo "p0=$p0 render=$render assemble=$assemble qa=$qa"
