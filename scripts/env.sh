# Sourced by bin/pulumi and the Makefile: the project's Pulumi environment.
# Every default can be overridden by setting the variable before running.
# bash only (it reads BASH_SOURCE):
# shellcheck shell=bash
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$_root/.tools/bin:$_root/.venv/bin:$PATH"
export PULUMI_RUNTIME_VIRTUALENV="${PULUMI_RUNTIME_VIRTUALENV:-$_root/.venv}"
# State: a local file backend in .state/ (git-ignored). Point PULUMI_BACKEND_URL
# at your own backend (file://..., s3://..., azblob://..., gs://...) to keep state elsewhere.
export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$_root/.state/backend}"
# Secrets: the passphrase provider. Without a passphrase of your own, one is
# generated once into .state/passphrase (0600); keep it with the state.
if [ -z "${PULUMI_CONFIG_PASSPHRASE:-}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
  if [ ! -s "$_root/.state/passphrase" ]; then
    mkdir -p "$_root/.state"
    (umask 077; head -c 32 /dev/urandom | base64 > "$_root/.state/passphrase")
  fi
  export PULUMI_CONFIG_PASSPHRASE_FILE="$_root/.state/passphrase"
fi
case "$PULUMI_BACKEND_URL" in file://*) mkdir -p "${PULUMI_BACKEND_URL#file://}" ;; esac
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_DIY_BACKEND_NO_LEGACY_WARNING=true
unset _root
