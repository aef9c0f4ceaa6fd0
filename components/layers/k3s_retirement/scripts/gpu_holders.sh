#!/bin/bash
# Read-only: every process holding a GPU device open, as `<pid> <comm> <device>` (who holds each
# GPU right now). $1 the GPU device prefix (/dev/nvidia).
for fd in /proc/[0-9]*/fd/*; do
  t=$(readlink "$fd" 2>/dev/null) || continue
  case "$t" in "$1"[0-9]*)
    pid=${fd#/proc/}; pid=${pid%%/*}
    echo "$pid $(cat "/proc/$pid/comm" 2>/dev/null) $t" ;;
  esac
done | sort -u
