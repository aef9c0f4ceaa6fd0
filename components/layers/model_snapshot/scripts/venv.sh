#!/bin/sh
# The downloader's Python environment: a venv of the host's python3 with the wheels the layer
# shipped, installed by pip from that tarball only (no index) and checked against the hashes
# pinned in its requirements file. A half-made venv fails the layer's verify and is made again.
# $1 the venv path, $2 the wheels tarball.

set -eu
venv="$1"; wheels="$2"
unpacked="$venv.wheels"
rm -rf -- "$venv" "$unpacked"
mkdir -p -- "$unpacked"
tar -xf "$wheels" -C "$unpacked"
python3 -m venv -- "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-cache-dir -q --no-index \
  --require-hashes --find-links "$unpacked/wheels" -r "$unpacked/wheels/requirements.txt"
rm -rf -- "$unpacked"
