#!/usr/bin/env bash
# The test command: unit, mock and integration tests (the last with the real Pulumi CLI).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv/bin/python ] || [ ! -x .tools/bin/pulumi ]; then echo "run 'make setup' first" >&2; exit 1; fi
exec .venv/bin/python -m pytest "${@:-tests}"
