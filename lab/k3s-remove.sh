#!/bin/bash
# Runs on a lab node as root (lab/k3s.py, `python -m lab k3s remove`, after k3s-killall.sh):
# takes the lab's K3s off the node completely, so other lab tests find a clean node.
# Idempotent. Disables k3s / k3s-agent, removes the units,
# drop-ins, env files, binaries' links, /etc/rancher, /var/lib/rancher, /var/lib/kubelet,
# /run/k3s, /srv/k3s-data, drops the PostgreSQL cluster and purges the packages the install
# added, and removes the fake GPU devices it made.
set -uo pipefail
LABSTATE=/var/lib/gpu-fleet-lab

# lab/k3s.py runs k3s-killall.sh first: services stopped, shims killed, pod mounts unmounted
for u in k3s-agent k3s; do systemctl disable "$u.service" >/dev/null 2>&1 || true; done
if command -v pg_lsclusters >/dev/null && grep -q '^15 *main ' <<<"$(pg_lsclusters -h 2>/dev/null)"; then
  pg_dropcluster --stop 15 main
fi
rm -rf /etc/systemd/system/postgresql@15-main.service.d
if [ -s "$LABSTATE/k3s-added-packages" ]; then
  # shellcheck disable=SC2046 # one package name a line
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -q $(cat "$LABSTATE/k3s-added-packages") >/dev/null 2>&1 \
    || { echo "$(hostname): apt-get purge of $(tr '\n' ' ' < "$LABSTATE/k3s-added-packages") failed" >&2; exit 1; }
  rm -rf /etc/postgresql /var/lib/postgresql /var/log/postgresql /etc/postgresql-common
fi
if [ -f "$LABSTATE/k3s-made-devices" ]; then
  while read -r d; do case "$d" in /dev/fakegpu*) rm -f "$d" ;; esac; done < "$LABSTATE/k3s-made-devices"
fi
rm -f "$LABSTATE/k3s-added-packages" "$LABSTATE/k3s-made-devices"
rmdir "$LABSTATE" 2>/dev/null || true
rm -rf /etc/systemd/system/k3s.service /etc/systemd/system/k3s.service.env /etc/systemd/system/k3s.service.d \
  /etc/systemd/system/k3s-agent.service /etc/systemd/system/k3s-agent.service.env /etc/systemd/system/k3s-agent.service.d \
  /etc/systemd/system/multi-user.target.wants/k3s.service /etc/systemd/system/multi-user.target.wants/k3s-agent.service \
  /usr/local/bin/k3s /usr/local/bin/kubectl /usr/local/bin/k3s-killall.sh \
  /etc/rancher /var/lib/rancher /var/lib/kubelet /run/k3s /srv/k3s-data
systemctl daemon-reload
systemctl reset-failed k3s.service k3s-agent.service >/dev/null 2>&1 || true
echo "$(hostname): K3s removed"
