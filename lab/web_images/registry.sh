#!/usr/bin/env bash
# The lab's local registry on the storage host (python -m lab web-images, lab/web_images):
#   registry.sh setup            Debian's docker-registry from the lab's apt repository, plain
#                                HTTP on :5000, no auth, as docker-registry.service (enabled)
#   registry.sh push COMP=REPO:TAG...  stdin: a tar of COMP.oci.tar archives; each is imported
#                                into a one-shot podman store (vfs, in a temp dir, removed
#                                after) and pushed as localhost:5000/REPO:TAG;
#                                prints "REPO sha256:..." (podman push --digestfile) per image
set -euo pipefail
export LC_ALL=C DEBIAN_FRONTEND=noninteractive

CONFIG=/etc/docker/registry/config.yml
UNIT=docker-registry.service

wait_v2() {
  local i
  for i in $(seq 1 100); do
    if python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:5000/v2/", timeout=2)' 2>/dev/null; then
      return 0
    fi
    [ "$i" -eq 100 ] || sleep 0.1
  done
  journalctl -u "$UNIT" -n 30 --no-pager >&2 || true
  echo "registry: http://127.0.0.1:5000/v2/ does not answer" >&2
  return 1
}

setup() {
  local need=()
  [ "$(dpkg-query -W -f='${Status}' docker-registry 2>/dev/null)" = 'install ok installed' ] || need+=(docker-registry)
  [ "$(dpkg-query -W -f='${Status}' podman 2>/dev/null)" = 'install ok installed' ] || need+=(podman)
  if [ "${#need[@]}" -gt 0 ]; then
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    echo "registry: installed ${need[*]}"
  fi
  local want changed=0
  want="$(cat <<'EOF'
# gpu-fleet lab registry (lab/web_images/registry.sh): plain HTTP, no auth, lab only
version: 0.1
log:
  level: warn
  fields:
    service: registry
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: /var/lib/docker-registry
  delete:
    enabled: false
http:
  addr: :5000
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
EOF
)"
  if [ "$(cat "$CONFIG" 2>/dev/null)" != "$want" ]; then
    printf '%s\n' "$want" > "$CONFIG.tmp" && mv "$CONFIG.tmp" "$CONFIG"
    changed=1
  fi
  systemctl enable -q "$UNIT"
  if [ "$changed" = 1 ] || ! systemctl is-active -q "$UNIT"; then
    systemctl restart "$UNIT"
    echo "registry: $UNIT (re)started"
  fi
  wait_v2
}

push() {
  local tmp
  tmp="$(mktemp -d /var/tmp/lab-web-images.XXXXXX)"
  # podman keeps its blob-info cache in /var/lib/containers/cache whatever the store: a host
  # without /var/lib/containers before is left without it
  local drop=""
  [ -e /var/lib/containers ] || drop=/var/lib/containers
  # shellcheck disable=SC2064 # expand now: the paths are fixed
  trap "rm -rf '$tmp' $drop" EXIT
  mkdir "$tmp/in"
  tar -xf - -C "$tmp/in"
  # Every path podman would write under /var/lib/containers or /run/containers goes to $tmp.
  printf '[storage]\ndriver = "vfs"\ngraphroot = "%s/root"\nrunroot = "%s/run"\n' \
    "$tmp" "$tmp" >"$tmp/storage.conf"
  printf '[engine]\nstatic_dir = "%s/root/libpod"\ntmp_dir = "%s/run/libpod"\nvolume_path = "%s/root/volumes"\nevents_logger = "none"\n[network]\nnetwork_config_dir = "%s/net"\n' \
    "$tmp" "$tmp" "$tmp" "$tmp" >"$tmp/containers.conf"
  local pm=(env "CONTAINERS_STORAGE_CONF=$tmp/storage.conf" "CONTAINERS_CONF=$tmp/containers.conf" podman)
  local ref comp repo
  for ref in "$@"; do
    comp="${ref%%=*}"
    repo="${ref#*=}"
    repo="${repo%%:*}"
    "${pm[@]}" pull -q "oci-archive:$tmp/in/$comp.oci.tar" >"$tmp/$comp.id"
    "${pm[@]}" push -q --tls-verify=false --digestfile "$tmp/$comp.digest" \
      "$(cat "$tmp/$comp.id")" "docker://localhost:5000/${ref#*=}"
    printf '%s %s\n' "$repo" "$(cat "$tmp/$comp.digest")"
  done
}

case "${1:-}" in
  setup) setup ;;
  push) shift; push "$@" ;;
  *) echo "usage: registry.sh setup | push COMP=REPO:TAG..." >&2; exit 2 ;;
esac
