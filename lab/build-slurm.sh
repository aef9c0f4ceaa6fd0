#!/bin/bash
# Rebuild Debian trixie's slurm-wlm 24.11.5-4+deb13u1 source package on Debian
# bookworm (amd64) into .deb files.
#
# Usage: build.sh OUTDIR
#   OUTDIR   where the resulting .deb files (+ SHA256SUMS, versions.txt) go.
# Env:
#   BASE=/var/tmp/slurm-build   working area (downloads in $BASE/dl, tree in $BASE/build)
#   MIRROR=<uri>                this machine's Debian mirror (required; lab/slurm_release.py
#                               passes the one its apt sources name, lab/apt_sources.py)
#   SECMIRROR=<uri>             its Debian security mirror, if it has one (also tried)
#   JOBS=2                      parallel=N for the build
#   SKIP_APT=1                  skip apt-get update/install of build deps
#
# Trust chain: trixie InRelease (gpgv against bookworm's debian-archive-keyring,
# which carries the trixie release key) -> sha256 of main/source/Sources.xz ->
# sha256 of .dsc / .orig.tar.gz / .debian.tar.xz from the slurm-wlm stanza.
#
# Local changes to the Debian packaging (all done by patch_packaging below):
#   1. debian/control: Build-Depends "dpkg-dev (>= 1.22.5)" -> "dpkg-dev"
#      (bookworm has 1.21.x; the only thing 1.22.5 adds here is the
#      ${t64:Provides} substvar, which then expands to nothing -- harmless,
#      bookworm never had libslurm42/libpmi0 t64-less names at this version).
#   2. debian/control: slurm-wlm-basic-plugins Depends "libpmix2t64" ->
#      "libpmix2" (bookworm's package name for the same library).
#   3. debian/slurm-wlm-basic-plugins.sysusers: "u! slurm 64030" ->
#      "u slurm 64030" (bookworm's systemd-sysusers 252 rejects "u!", which
#      made the basic-plugins postinst fail).
#   4. debian/changelog: new entry VERSION~bookworm1 so the rebuild sorts
#      below the real trixie package and is recognisable.
# Build deps: everything from Build-Depends is taken from bookworm
# (librocm-smi-dev 5.2.3 exists there and is sufficient), except that
# man2html-base is installed instead of man2html (same /usr/bin/man2html, but
# man2html pulls in apache2). dpkg-buildpackage runs with -d for that reason.
set -euo pipefail

OUT=${1:?usage: $0 OUTDIR}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
BASE=${BASE:-/var/tmp/slurm-build}
MIRROR=${MIRROR:-}
[ -n "$MIRROR" ] || { echo "$0: MIRROR is not set: set it to the URI of this machine's Debian mirror" \
  "(its apt sources' bookworm entry); python -m lab passes it" >&2; exit 2; }
SECMIRROR=${SECMIRROR:-}
JOBS=${JOBS:-2}
PKG=slurm-wlm
VERSION=24.11.5-4+deb13u1
LOCALVER="${VERSION}~bookworm1"
DL=$BASE/dl
BUILD=$BASE/build
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

log() { printf '[%s] %s\n' "$(date '+%F %T')" "$*" >&2; }

BUILD_DEPS=(build-essential fakeroot quilt debhelper dh-exec po-debconf python3
  libmunge-dev libncurses-dev libgtk2.0-dev default-libmysqlclient-dev
  libpam0g-dev libperl-dev chrpath liblua5.1-0-dev libhwloc-dev
  libipmimonitoring-dev hdf5-helpers libfreeipmi-dev libhdf5-dev man2html-base
  libcurl4-openssl-dev libpmix-dev libhttp-parser-dev libyaml-dev libjson-c-dev
  libjwt-dev liblz4-dev bash-completion libdbus-1-dev librdkafka-dev
  librocm-smi-dev curl xz-utils gpgv debian-archive-keyring)

install_build_deps() {
  if [ "${SKIP_APT:-0}" = 1 ]; then log "SKIP_APT=1: not installing build deps"; return; fi
  log "installing build dependencies from bookworm"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${BUILD_DEPS[@]}"
}

# fetch URL DEST: curl, '+' url-encoded
fetch() {
  local url=${1//+/%2B}
  curl -sSf --retry 3 -o "$2.part" "$url" && mv "$2.part" "$2"
}

get_sources_stanza() {
  mkdir -p "$DL"; cd "$DL"
  log "fetching and verifying trixie InRelease + Sources.xz"
  fetch "$MIRROR/dists/trixie/InRelease" InRelease
  gpgv --keyring "$KEYRING" InRelease 2>gpgv.log || { cat gpgv.log >&2; log "InRelease signature check failed"; exit 1; }
  fetch "$MIRROR/dists/trixie/main/source/Sources.xz" Sources.xz
  local want
  want=$(awk '/^SHA256:/{s=1;next} /^[A-Za-z]/{s=0} s && $3=="main/source/Sources.xz"{print $1}' InRelease)
  [ -n "$want" ] || { log "no Sources.xz hash in InRelease"; exit 1; }
  echo "$want  Sources.xz" | sha256sum -c --quiet -
  xz -dc Sources.xz > Sources
  awk -v p="$PKG" -v v="$VERSION" '
    /^$/ { if (hit) { print stanza; done=1; exit } stanza=""; pk=""; next }
    { stanza = stanza $0 "\n" }
    /^Package: / { pk=$2 }
    /^Version: / { if (pk==p && $2==v) hit=1 }
    END { if (hit && !done) print stanza }' Sources > stanza.txt
  [ -s stanza.txt ] || { log "$PKG $VERSION not found in trixie Sources"; exit 1; }
  awk '/^Checksums-Sha256:/{s=1;next} /^[A-Za-z]/{s=0} s{print $1"  "$3}' stanza.txt > SHA256SUMS.expected
  log "expected sha256 (from trixie Sources):"; cat SHA256SUMS.expected >&2
}

download_files() {
  cd "$DL"
  local dir sum f ok url urls
  dir=$(awk '/^Directory:/{print $2}' stanza.txt)
  while read -r sum f; do
    if [ -f "$f" ] && echo "$sum  $f" | sha256sum -c --quiet - 2>/dev/null; then
      log "have $f"; continue
    fi
    ok=0
    # The point-release upload lives in the main pool; a security upload of
    # the same version also lives in the security archive's pool/updates. Try both.
    urls=("$MIRROR/$dir/$f")
    [ -z "$SECMIRROR" ] || urls+=("$SECMIRROR/pool/updates/main/${dir#pool/main/}/$f")
    for url in "${urls[@]}"; do
      if fetch "$url" "$f" 2>/dev/null; then ok=1; break; fi
    done
    if [ $ok = 0 ]; then
      case $f in
        *.dsc) log "WARNING: $f not downloadable from mirror; will unpack tarballs by hand"; continue;;
        *) log "cannot download $f"; exit 1;;
      esac
    fi
    echo "$sum  $f" | sha256sum -c - >&2
  done < SHA256SUMS.expected
}

unpack() {
  local dsc=${PKG}_${VERSION}.dsc upv=${VERSION%-*}
  local orig=${PKG}_${upv}.orig.tar.gz deb=${PKG}_${VERSION}.debian.tar.xz
  rm -rf "$BUILD"; mkdir -p "$BUILD"
  SRC=$BUILD/${PKG}-${upv}
  if [ -f "$DL/$dsc" ]; then
    log "dpkg-source -x $dsc"
    (cd "$BUILD" && cp "$DL/$dsc" "$DL/$orig" "$DL/$deb" . && dpkg-source -x "$dsc" "$SRC")
  else
    # Equivalent of dpkg-source -x for format 3.0 (quilt): unpack orig with its
    # top dir stripped, unpack debian/ on top; the quilt series is applied by
    # dpkg-source --before-build (called by dpkg-buildpackage).
    log "unpacking $orig + $deb by hand (no .dsc)"
    mkdir -p "$SRC"
    tar -xzf "$DL/$orig" -C "$SRC" --strip-components=1
    tar -xJf "$DL/$deb" -C "$SRC"
    (cd "$SRC" && dpkg-source --before-build .)
  fi
}

patch_packaging() {
  cd "$SRC"
  log "patching debian/ for bookworm"
  cp debian/control debian/control.orig-trixie
  cp debian/slurm-wlm-basic-plugins.sysusers debian/slurm-wlm-basic-plugins.sysusers.orig-trixie
  sed -i -e 's/^Build-Depends: dpkg-dev (>= 1\.22\.5),/Build-Depends: dpkg-dev,/' \
         -e 's/\blibpmix2t64\b/libpmix2/' debian/control
  grep -q '^Build-Depends: dpkg-dev,$' debian/control
  if grep -q libpmix2t64 debian/control; then log "libpmix2t64 patch failed"; exit 1; fi
  # systemd-sysusers in bookworm (252) does not know the 'u!' (locked user)
  # modifier added in systemd 256; postinst would fail with
  # "Unknown modifier 'u!'". Plain 'u' is accepted (the account is still
  # created without a usable password; postinst's adduser runs first anyway).
  sed -i 's/^u! /u /' debian/slurm-wlm-basic-plugins.sysusers
  grep -q '^u slurm 64030' debian/slurm-wlm-basic-plugins.sysusers
  if [[ $(head -1 debian/changelog) != *"($LOCALVER)"* ]]; then
    { printf '%s (%s) bookworm; urgency=medium\n\n' "$PKG" "$LOCALVER"
      printf '  * Rebuild of trixie %s for bookworm (gpu-fleet lab):\n' "$VERSION"
      printf '    - Build-Depends: drop dpkg-dev (>= 1.22.5) version constraint.\n'
      printf '    - slurm-wlm-basic-plugins: depend on libpmix2 (bookworm name)\n'
      printf '      instead of libpmix2t64.\n'
      printf '    - slurm-wlm-basic-plugins.sysusers: "u!" -> "u" (systemd 252\n'
      printf '      sysusers does not know the "u!" modifier).\n\n'
      printf ' -- gpu-fleet lab build <root@localhost>  %s\n\n' "$(date -R)"
      cat debian/changelog; } > debian/changelog.new
    mv debian/changelog.new debian/changelog
  fi
  { diff -u debian/control.orig-trixie debian/control
    diff -u debian/slurm-wlm-basic-plugins.sysusers.orig-trixie debian/slurm-wlm-basic-plugins.sysusers
  } > "$BASE/bookworm-packaging.diff" || true
  rm -f debian/control.orig-trixie debian/slurm-wlm-basic-plugins.sysusers.orig-trixie
}

build() {
  cd "$SRC"
  log "dpkg-buildpackage (parallel=$JOBS) -- log: $BASE/dpkg-buildpackage.log"
  local t0 t1
  t0=$(date +%s)
  DEB_BUILD_OPTIONS="nocheck nodoc parallel=$JOBS" \
    dpkg-buildpackage -b -uc -us -d > "$BASE/dpkg-buildpackage.log" 2>&1 || {
      tail -50 "$BASE/dpkg-buildpackage.log" >&2; log "BUILD FAILED"; exit 1; }
  t1=$(date +%s)
  echo "build wall time: $((t1 - t0)) s" | tee "$BASE/build-walltime.txt" >&2
}

collect() {
  log "copying debs to $OUT"
  cp -v "$BUILD"/*.deb "$OUT"/ >&2
  cp -v "$BUILD"/*.buildinfo "$BUILD"/*.changes "$OUT"/ 2>/dev/null >&2 || true
  cp "$BASE/bookworm-packaging.diff" "$OUT"/ 2>/dev/null || true
  (cd "$OUT" && sha256sum ./*.deb > SHA256SUMS &&
   for d in ./*.deb; do dpkg-deb -f "$d" Package Version | paste -sd' '; done > versions.txt)
}

verify() {
  # Simulate installing the lab's packages on this bookworm host: proves all
  # Depends are satisfiable from bookworm + the freshly built debs.
  cd "$OUT"
  local want=(slurmctld slurmd slurm-client slurmdbd slurmrestd
              slurm-wlm-mysql-plugin slurm-wlm-jwt-plugin
              slurm-wlm-basic-plugins sackd libslurm42t64 libpmi0t64 libpmi2-0t64)
  local files=() p
  for p in "${want[@]}"; do files+=("./${p}_${LOCALVER}_amd64.deb"); done
  log "apt-get install --simulate ${want[*]}"
  apt-get install --simulate --no-install-recommends "${files[@]}" > "$OUT/simulate-install.txt"
  grep -E '^Inst (slurm|libslurm|libpmi|sackd)' "$OUT/simulate-install.txt" >&2 || true
}

install_build_deps
get_sources_stanza
download_files
unpack
patch_packaging
build
collect
verify
log "done: debs in $OUT"
