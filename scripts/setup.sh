#!/usr/bin/env bash
# Set-up: the project's virtualenv with pinned requirements, and the Pulumi CLI,
# its Python language host and the shims the official release ships beside it.
#
# No registry reachable here ships the Pulumi CLI, so it is built from the Go
# module proxy (tools/pulumi-cli) once per machine and cached, keyed by version,
# under $GPU_FLEET_TOOL_CACHE (default /var/cache/gpu-fleet, or
# ~/.cache/gpu-fleet when that is not writable). A `pulumi` already on PATH at
# the pinned version is used as is. The project's .tools/bin links to the cache.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/versions.env
. scripts/versions.env

log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

pick_cache() {
  local c="${GPU_FLEET_TOOL_CACHE:-/var/cache/gpu-fleet}"
  if mkdir -p "$c" 2>/dev/null && [ -w "$c" ]; then echo "$c"; return; fi
  c="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-fleet"
  mkdir -p "$c" && echo "$c"
}
CACHE="$(pick_cache)"
TOOLS="$ROOT/.tools/bin"
mkdir -p "$TOOLS"

# --- 0. the lab's K3s control plane, built in the background --------------------
# kube-apiserver + kubectl (tools/k3s-lab, k8s.io/kubernetes $K8S_VERSION) and kine
# $KINE_VERSION (cgo SQLite, needs gcc), cached machine-wide under $CACHE/k3s-lab/<key>/
# (key: versions + hash of the tools module) with a .ok marker; the lab binds that directory
# read-only into its hosts. It builds while the rest of set-up runs and is waited for at
# the end. GPU_FLEET_K3S_LAB=0 skips it (the lab's K3s then cannot be installed).
# The recipe (versions, flags) is part of the key: bump K3S_RECIPE when the build changes.
K3S_RECIPE=2
K3S_KEY="$K8S_VERSION-kine-$KINE_VERSION-$( { echo "recipe $K3S_RECIPE"; cd tools/k3s-lab \
  && LC_ALL=C sha256sum go.mod go.sum tools.go; } | sha256sum | cut -c1-12)"
K3S_DIR="$CACHE/k3s-lab/$K3S_KEY"
K3S_PID=""
build_k3s_lab() { # runs in the background; writes $K3S_DIR/.ok when everything is built
  local tmp="$K3S_DIR.tmp.$$" major minor
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
  local x="" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    x="$x -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  rm -rf "$tmp" && mkdir -p "$tmp"
  ( cd tools/k3s-lab && go build -trimpath -ldflags "-s -w$x" -o "$tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl ) || return 1
  GOBIN="$tmp" CGO_ENABLED=1 go install -trimpath \
    -ldflags "-s -w -X github.com/k3s-io/kine/pkg/version.Version=$KINE_VERSION -X github.com/k3s-io/kine/pkg/version.GitCommit=release" \
    "github.com/k3s-io/kine@$KINE_VERSION" \
    || return 1
  touch "$tmp/.ok"
  rm -rf "$K3S_DIR" && mv "$tmp" "$K3S_DIR"
}
if [ "${GPU_FLEET_K3S_LAB:-1}" != 0 ]; then
  if [ -f "$K3S_DIR/.ok" ]; then
    log "lab K3s parts (kube-apiserver, kubectl $K8S_VERSION, kine $KINE_VERSION) cached at $K3S_DIR"
  elif ! command -v go >/dev/null; then
    die "Go is required to build the lab's K3s parts (none on PATH)"
  else
    log "building the lab's K3s parts in the background (first time on this machine; log: $CACHE/k3s-lab/build.log)"
    mkdir -p "$CACHE/k3s-lab"
    K3S_START=$SECONDS
    ( GOFLAGS="${GOFLAGS:--buildvcs=false}" build_k3s_lab ) >"$CACHE/k3s-lab/build.log" 2>&1 &
    K3S_PID=$!
  fi
fi

# --- 1. virtualenv ------------------------------------------------------------
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || die "python3 not found (need Python >= 3.11)"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "Python >= 3.11 required"
if [ -d .venv ] && [ ! -L .venv ]; then
  # a checkout's own .venv (made before the machine-wide one): kept, and updated in place
  REQ_HASH="$(sha256sum requirements.txt | cut -c1-16)"
  if [ "$(cat .venv/.requirements-hash 2>/dev/null)" != "$REQ_HASH" ]; then
    log "installing pinned requirements into .venv"
    .venv/bin/pip install --disable-pip-version-check -q -r requirements.txt
    echo "$REQ_HASH" > .venv/.requirements-hash
  else
    log ".venv up to date"
  fi
else
  # Built once per machine for one interpreter and one requirements.txt, in the cache, and
  # linked: a clean checkout (CI's) would otherwise install the same wheels again (30 s).
  # A virtualenv is not relocatable (its scripts name its path), so it is built in place;
  # the .ok marker is written last, and a half-built one is built again.
  VENV_KEY="$( { "$PY" -c 'import sys; print(sys.executable); print(sys.version)'; cat requirements.txt; } \
    | sha256sum | cut -c1-16)"
  VENV="$CACHE/venv/$VENV_KEY"
  mkdir -p "$CACHE/venv"
  (
    flock 9
    if [ ! -f "$VENV/.ok" ]; then
      log "building the virtualenv (first time on this machine for this requirements.txt): $VENV"
      rm -rf "$VENV"
      "$PY" -m venv "$VENV"
      "$VENV/bin/pip" install --disable-pip-version-check -q -r requirements.txt
      touch "$VENV/.ok"
    else
      log "virtualenv cached at $VENV"
    fi
  ) 9>"$CACHE/venv/$VENV_KEY.lock"
  ln -sfn "$VENV" .venv
fi

# --- 1b. system packages for the lab (python -m lab) and the tests -------------
# systemd-nspawn hosts need debootstrap, nspawn itself, zstd for the cached image,
# an ssh client, dpkg-scanpackages for the hosts' local apt repository and ip(8).
# The tests need shellcheck (tests/unit/test_shell_scripts.py checks every *.sh) and chromium
# (headless: the web layer's page rendered through an SSH tunnel, tests/lab/test_v2411_web.py).
# Installed only as root where apt-get exists; apt-get update only when one is missing.
LAB_PKGS="debootstrap systemd-container zstd openssh-client dpkg-dev iproute2 chromium"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for p in $LAB_PKGS; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = 'install ok installed' ] || missing+=("$p")
  done
  command -v shellcheck >/dev/null || missing+=(shellcheck)
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing system packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt_log="$(mktemp)"
    apt-get update -qq >"$apt_log" 2>&1 || log "apt-get update reported errors (continuing)"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$apt_log" 2>&1 \
      || { cat "$apt_log" >&2; die "apt-get install of ${missing[*]} failed"; }
    rm -f "$apt_log"
  fi
fi
if ! command -v shellcheck >/dev/null; then
  log "shellcheck is not installed and the tests need it (they fail without it): install it"
  log "  as root (Debian/Ubuntu: sudo apt-get install shellcheck; elsewhere your package"
  log "  manager's shellcheck, or a release from https://github.com/koalaman/shellcheck/releases)"
fi

# --- 1c. the model downloader's wheels for the storage host --------------------
# The model snapshot layer installs huggingface_hub on the storage host from these wheels
# (pip --no-index --require-hashes there): hosts need no package index. Fetched for the hosts'
# Python (Debian bookworm: CPython 3.11, x86_64) and cached machine-wide keyed by the
# requirements file; the tarball is deterministic, so the stack records one SHA-256 for it.
DL_REQ=components/layers/model_snapshot/downloader.txt
DL_DIR="$CACHE/model-downloader/$(sha256sum "$DL_REQ" | cut -c1-16)"
if [ ! -f "$DL_DIR/wheels.tar" ]; then
  log "fetching the model downloader's wheels ($DL_REQ)"
  rm -rf "$DL_DIR.tmp.$$" && mkdir -p "$DL_DIR.tmp.$$/wheels"
  .venv/bin/pip download --disable-pip-version-check -q --no-deps --require-hashes --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$DL_DIR.tmp.$$/wheels" -r "$DL_REQ" || die "pip download of $DL_REQ failed"
  cp "$DL_REQ" "$DL_DIR.tmp.$$/wheels/requirements.txt"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$DL_DIR.tmp.$$" \
    -cf "$DL_DIR.tmp.$$/wheels.tar" wheels
  rm -rf "$DL_DIR.tmp.$$/wheels" && mkdir -p "$(dirname "$DL_DIR")"
  rm -rf "$DL_DIR" && mv "$DL_DIR.tmp.$$" "$DL_DIR"
else
  log "model downloader wheels cached at $DL_DIR"
fi
mkdir -p .tools/model-downloader && ln -sfn "$DL_DIR/wheels.tar" .tools/model-downloader/wheels.tar

# --- 2. the Pulumi CLI --------------------------------------------------------
command -v go >/dev/null || die "Go is required to build the Pulumi CLI (none on PATH)"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

build_go() { # <module dir> <package> <output> <ldflags>
  local dir="$1" pkg="$2" out="$3" ldflags="$4" start=$SECONDS
  log "building $pkg (first time on this machine)"
  mkdir -p "$(dirname "$out")"
  ( cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp.$$" "$pkg" ) &
  local pid=$!
  local last=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    if [ $((SECONDS - last)) -ge 30 ]; then
      last=$SECONDS
      log "  still building $(basename "$out") ($((SECONDS - start)) s)"
    fi
  done
  wait "$pid" || die "go build of $pkg failed (see output above)"
  mv -f "$out.tmp.$$" "$out"
  log "built $(basename "$out") in $((SECONDS - start)) s"
}

CLI_DIR="$CACHE/pulumi/$PULUMI_VERSION"
existing="$(command -v pulumi 2>/dev/null || true)"
if [ -n "$existing" ] && [ "$existing" != "$TOOLS/pulumi" ] \
   && [ "$("$existing" version 2>/dev/null)" = "$PULUMI_VERSION" ]; then
  log "using pulumi $PULUMI_VERSION already on PATH: $existing"
  ln -sfn "$existing" "$TOOLS/pulumi"
else
  if [ ! -x "$CLI_DIR/pulumi" ]; then
    build_go tools/pulumi-cli github.com/pulumi/pulumi/pkg/v3/cmd/pulumi "$CLI_DIR/pulumi" \
      "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
  else
    log "pulumi $PULUMI_VERSION cached at $CLI_DIR"
  fi
  ln -sfn "$CLI_DIR/pulumi" "$TOOLS/pulumi"
fi

# --- 3. the Python language host ----------------------------------------------
HOST_DIR="$CACHE/pulumi-language-python/$LANGHOST_VERSION"
if [ ! -x "$HOST_DIR/pulumi-language-python" ]; then
  build_go tools/pulumi-language-python github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python \
    "$HOST_DIR/pulumi-language-python" \
    "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$LANGHOST_VERSION"
else
  log "pulumi-language-python $LANGHOST_VERSION cached at $HOST_DIR"
fi
# The exec script the host runs comes from the SDK release the virtualenv pins.
EXEC="$CACHE/pulumi-language-python-exec/$PYTHON_SDK_VERSION/pulumi-language-python-exec"
if [ ! -f "$EXEC" ]; then
  sdk_dir="$(cd tools/pulumi-cli && go mod download -json "github.com/pulumi/pulumi/sdk/v3@$PYTHON_SDK_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -f "$sdk_dir/python/cmd/pulumi-language-python-exec" ] || die "no exec script in sdk/v3@$PYTHON_SDK_VERSION"
  mkdir -p "$(dirname "$EXEC")"
  install -m 0755 "$sdk_dir/python/cmd/pulumi-language-python-exec" "$EXEC"
fi
# What the shim runs: an adapter that starts the host, forwards its RPCs and adds the
# RunPlugin RPC newer CLIs use to start Python policy packs. Keyed by its sources' hash.
ADAPTER_HASH="$(cd tools/pulumi-language-python-adapter \
  && LC_ALL=C sha256sum go.mod go.sum ./*.go | sha256sum | cut -c1-16)"
ADAPTER="$CACHE/pulumi-language-python-adapter/$ADAPTER_HASH/pulumi-language-python-adapter"
if [ ! -x "$ADAPTER" ]; then
  build_go tools/pulumi-language-python-adapter \
    github.com/gpu-fleet/gpu-fleet/tools/pulumi-language-python-adapter "$ADAPTER" "-s -w"
else
  log "pulumi-language-python-adapter cached at $(dirname "$ADAPTER")"
fi

# --- 4. shims next to the CLI -------------------------------------------------
# The CLI looks for plugins next to its own binary first, as in the official
# release; a pulumi found on PATH keeps the shims its release ships.
SHIMS="$(dirname "$(readlink -f "$TOOLS/pulumi")")"
write_shim() { # <name> <body>
  [ -w "$SHIMS" ] || { [ -x "$SHIMS/$1" ] && return 0; SHIMS="$TOOLS"; }
  printf '#!/bin/sh\n# Written by gpu-fleet scripts/setup.sh.\n%s\n' "$2" > "$SHIMS/$1.tmp"
  chmod 0755 "$SHIMS/$1.tmp"
  mv -f "$SHIMS/$1.tmp" "$SHIMS/$1"
}
# Interpreter of the program's virtualenv (exported by scripts/env.sh), else python3.
# shellcheck disable=SC2016 # literal on purpose: the shim expands it when it runs
VENV_PY='"${PULUMI_RUNTIME_VIRTUALENV:+$PULUMI_RUNTIME_VIRTUALENV/bin/}python3"'
# CLIs since ~v3.100 send runtime options in RPCs; the v3.68 host still reads
# them as flags, so pass the project's `virtualenv` option the way it expects.
# The adapter starts the host with exactly these flags and the CLI's arguments.
write_shim pulumi-language-python "venv=\$(sed -n 's/^[[:space:]]*virtualenv:[[:space:]]*//p' Pulumi.yaml 2>/dev/null | head -n1)
exec '$ADAPTER' -host='$HOST_DIR/pulumi-language-python' -use-executor='$EXEC' \${venv:+\"-virtualenv=\$venv\"} \"\$@\""
# The dynamic provider: components/provider_host.py (the SDK's server with more workers) in
# a project that has it (the engine starts plugins in the project directory).
write_shim pulumi-resource-pulumi-python "if [ -f components/provider_host.py ]; then exec $VENV_PY -u -m components.provider_host \"\$@\"; fi
exec $VENV_PY -u -m pulumi.dynamic \"\$@\""
write_shim pulumi-analyzer-policy-python "exec $VENV_PY -u -m pulumi.policy \"\$@\""

# --- 5. the lab's K3s parts: wait for the background build ----------------------
if [ -n "$K3S_PID" ]; then
  last=$SECONDS
  while kill -0 "$K3S_PID" 2>/dev/null; do
    sleep 2
    if [ $((SECONDS - last)) -ge 30 ]; then
      last=$SECONDS
      log "  still building the lab's K3s parts ($((SECONDS - K3S_START)) s)"
    fi
  done
  wait "$K3S_PID" || { tail -n 40 "$CACHE/k3s-lab/build.log" >&2; die "build of the lab's K3s parts failed (log: $CACHE/k3s-lab/build.log)"; }
  log "built the lab's K3s parts in $((SECONDS - K3S_START)) s"
fi
if [ -f "$K3S_DIR/.ok" ]; then
  ln -sfn "$K3S_DIR" "$ROOT/.tools/k3s-lab"
fi

got="$("$TOOLS/pulumi" version)"
[ "$got" = "$PULUMI_VERSION" ] || die "pulumi version is $got, expected $PULUMI_VERSION"
log "ready: pulumi $got in $TOOLS (use bin/pulumi, or make preview|up|destroy STACK=...)"
