#!/bin/sh
# Kills (SIGKILL) every process running a program from under one directory: a job's node-local
# runtime (the task's trap and Slurm's Epilog). The runtime's ffmpeg may outlive a SIGTERM (the
# static 7.0 build finishes its filter graph first), so nothing there is left to end on its own.
# $1 the directory. Prints the PIDs it killed.
set -u
dir=$1
for p in /proc/[0-9]*; do
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  case "$exe" in "$dir"/*) kill -9 "${p#/proc/}" 2>/dev/null && printf '%s ' "${p#/proc/}" ;; esac
done
