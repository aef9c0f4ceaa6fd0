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
  # both pinned in requirements.txt; ruff.toml and mypy.ini say what they check (mypy's
  # cache, .mypy_cache, makes a warm run take seconds)
  check "ruff check" .venv/bin/ruff check .
  check mypy .venv/bin/mypy
fi
exec .venv/bin/python -m pytest "${@:-tests}"
