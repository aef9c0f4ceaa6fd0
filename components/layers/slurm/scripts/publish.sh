#!/bin/sh
# Publishes a Slurm release: its .debs, Packages(.gz), release.json and SHA256SUMS into a new directory.
# $1 source dir, $2 release dir, $3 Debian version, $4 release.json text.

set -eu
src="$1"; dst="$2"; ver="$3"
tmp="$dst.tmp.$$"; rm -rf "$tmp"; mkdir -p "$tmp"
n=0
for deb in "$src"/*.deb; do
  [ -e "$deb" ] || continue
  [ "$(dpkg-deb -f "$deb" Version)" = "$ver" ] || continue
  cp -- "$deb" "$tmp/"; n=$((n+1))
done
[ "$n" -gt 0 ] || { echo "no .deb with version $ver in $src" >&2; rm -rf "$tmp"; exit 4; }
cd "$tmp"
for deb in *.deb; do
  dpkg-deb -f "$deb"
  echo "Filename: ./$deb"
  echo "Size: $(stat -c %s "$deb")"
  echo "SHA256: $(sha256sum "$deb" | cut -d' ' -f1)"
  echo
done > Packages
gzip -9nc Packages > Packages.gz
printf '%s\n' "$4" > release.json
sha256sum -- *.deb Packages Packages.gz release.json > SHA256SUMS
cd /; rm -rf "$dst"; mv "$tmp" "$dst"
echo "published $n packages to $dst"
