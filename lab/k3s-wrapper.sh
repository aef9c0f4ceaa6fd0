#!/bin/bash
# /usr/local/bin/k3s on a lab node (written by `python -m lab k3s install`, lab/k3s.py).
#
# The lab's K3s, built from K3s's own parts: `k3s server` runs kine (K3s's datastore shim) on
# SQLite at /var/lib/rancher/k3s/server/db/state.db and the real kube-apiserver on :6443, then
# acts as an agent for its own node, as K3s does; `k3s agent` joins the server named by
# K3S_URL with K3S_TOKEN; `k3s kubectl ...` is the real kubectl with the admin kubeconfig.
#
# TEST DOUBLES (no kubelet, no containerd here): the agent part registers the Node object and
# heartbeats its Ready condition every 10 s through the API, and it starts one detached
# `containerd-shim-runc-v2` that holds the node's fake GPU devices open and a tmpfs mounted
# under /var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~empty-dir/cache. With the units'
# KillMode=process both outlive `systemctl stop`, as real K3s's shims and pod mounts do.
set -euo pipefail

DATA=/var/lib/rancher/k3s
BIN="$DATA/data/current/bin"
CONFIG=/etc/rancher/k3s/config.yaml
ADMIN_KUBECONFIG=/etc/rancher/k3s/k3s.yaml
K8S_VERSION=v1.34.3
K3S_VERSION="$K8S_VERSION+k3s1"
HEARTBEAT_S=10
PIDS=()
NAP=""

log() { printf '%s k3s[%s]: %s\n' "$(date -u +%H:%M:%S)" "$$" "$*" >&2; }

# `key: value` of config.yaml (flat keys only); empty when absent
conf() { sed -n "s/^$1:[[:space:]]*\"\{0,1\}\([^\"]*\)\"\{0,1\}[[:space:]]*\$/\1/p" "$CONFIG" 2>/dev/null | head -n1; }
# the items of a list key of config.yaml (`key:` then `  - "item"` lines)
conf_list() {
  awk -v k="$1:" '$0 == k {on=1; next} on && /^[[:space:]]+- / {sub(/^[[:space:]]+- /, ""); gsub(/"/, ""); print; next} {on=0}' \
    "$CONFIG" 2>/dev/null
}

# sleep so that a SIGTERM is handled at once (bash runs a trap only between commands)
nap() { sleep "$1" & NAP=$!; wait "$NAP" || true; NAP=""; }

stop_children() {
  trap - TERM INT
  log "stopping (the shim and pod mounts stay: KillMode=process; k3s-killall.sh removes them)"
  local i
  [ -z "$NAP" ] || kill "$NAP" 2>/dev/null || true
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do
    kill -TERM "${PIDS[$i]}" 2>/dev/null || true
    wait "${PIDS[$i]}" 2>/dev/null || true
  done
  exit 0
}

node_name() { local n; n="$(conf node-name)"; echo "${n:-$(hostname)}"; }

# --- the agent part (TEST DOUBLE of the kubelet's node registration and heartbeat) ------------

write_agent_kubeconfig() { # <server url> <token>
  local f="$DATA/agent/kubelet.kubeconfig"
  mkdir -p "$DATA/agent"
  ( umask 077
    cat > "$f.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: $DATA/agent/server-ca.crt
    server: $1
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    token: $2
EOF
  )
  mv -f "$f.tmp" "$f"
}

akubectl() { "$BIN/kubectl" --kubeconfig "$DATA/agent/kubelet.kubeconfig" --request-timeout=10s "$@"; }

register_node() {
  local name="$1" labels="" l k v
  while IFS= read -r l; do
    [ -n "$l" ] || continue
    k="${l%%=*}"; v="${l#*=}"
    labels="$labels    \"$k\": \"$v\",
"
  done < <(conf_list node-label)
  akubectl apply -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "$name", "labels": {
$labels    "kubernetes.io/hostname": "$name", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
    "node.kubernetes.io/instance-type": "k3s"}, "annotations": {"k3s.io/node-args": "[\"$ROLE\"]"}}}
EOF
}

status_patch() { # <name> <address> <transition time>
  local now cpus mem
  now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  cpus="$(nproc)"
  mem="$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)Ki"
  cat <<EOF
{"status": {
  "capacity": {"cpu": "$cpus", "memory": "$mem", "pods": "110", "nvidia.com/gpu": "8", "ephemeral-storage": "100Gi"},
  "allocatable": {"cpu": "$cpus", "memory": "$mem", "pods": "110", "nvidia.com/gpu": "8", "ephemeral-storage": "100Gi"},
  "addresses": [{"type": "InternalIP", "address": "$2"}, {"type": "Hostname", "address": "$1"}],
  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
    "message": "kubelet is posting ready status (gpu-fleet lab: heartbeat test double)",
    "lastHeartbeatTime": "$now", "lastTransitionTime": "$3"}],
  "nodeInfo": {"kubeletVersion": "$K3S_VERSION", "kubeProxyVersion": "$K3S_VERSION",
    "containerRuntimeVersion": "containerd://2.1.5-k3s1", "operatingSystem": "linux", "architecture": "amd64",
    "osImage": "Debian GNU/Linux 12 (bookworm)", "kernelVersion": "$(uname -r)",
    "machineID": "$(cat /etc/machine-id 2>/dev/null)", "systemUUID": "$(cat /etc/machine-id 2>/dev/null)",
    "bootID": "$(cat /proc/sys/kernel/random/boot_id)"}}}
EOF
}

pod_uid() { # a fixed pod UID per node, as if one pod of the DaemonSet ran there
  local h; h="$(printf 'gpu-metrics/%s' "$1" | sha256sum | cut -c1-32)"
  echo "${h:0:8}-${h:8:4}-${h:12:4}-${h:16:4}-${h:20:12}"
}

start_shim() { # TEST DOUBLE of containerd's task shim: detached, holds the fake GPUs open
  local name="$1" uid id dir vol
  uid="$(pod_uid "$name")"
  id="$(printf 'sandbox/%s' "$uid" | sha256sum | cut -c1-64)"
  vol="/var/lib/kubelet/pods/$uid/volumes/kubernetes.io~empty-dir/cache"
  mkdir -p "$vol"
  if ! mountpoint -q "$vol"; then
    mount -t tmpfs -o size=16m,mode=0755 tmpfs "$vol"
    printf 'cache of pod %s (gpu-metrics on %s)\n' "$uid" "$name" > "$vol/README"
  fi
  if pgrep -f -- "-id $id" >/dev/null; then return 0; fi
  dir="/run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/$id"
  mkdir -p "$dir"
  ( cd "$dir" && GPU_DEVICES="$(tr '\n' ' ' < "$DATA/agent/etc/lab-gpu-devices" 2>/dev/null)" setsid -f \
      "$BIN/containerd-shim-runc-v2" -namespace k8s.io -id "$id" \
      -address /run/k3s/containerd/containerd.sock </dev/null >/dev/null 2>&1 )
  log "started containerd-shim-runc-v2 -id $id (pod $uid)"
}

agent_loop() { # <server url> <token>
  local name address since
  name="$(node_name)"
  address="$(conf node-ip)"; address="${address:-$(hostname -I | awk '{print $1}')}"
  write_agent_kubeconfig "$1" "$2"
  until akubectl get --raw /readyz >/dev/null 2>&1; do
    log "waiting for the server at $1"
    nap 2
  done
  until register_node "$name"; do log "registering node $name failed (will retry)"; nap 2; done
  start_shim "$name"
  since="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  log "node $name registered; heartbeat every $HEARTBEAT_S s"
  while true; do
    status_patch "$name" "$address" "$since" \
      | akubectl patch node "$name" --subresource=status --type=merge --patch-file=/dev/stdin >/dev/null \
      || log "heartbeat failed (will retry)"
    nap "$HEARTBEAT_S"
  done
}

# --- server -----------------------------------------------------------------------------------

server() {
  local s="$DATA/server" tls="$DATA/server/tls" address token
  address="$(conf node-ip)"; address="${address:-$(hostname -I | awk '{print $1}')}"
  token="$(cat "$s/token")"
  mkdir -p "$s/db"
  rm -f "$s/kine.sock"
  "$BIN/kine" --endpoint "sqlite://$s/db/state.db?_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate" \
    --listen-address "unix://$s/kine.sock" --metrics-bind-address=0 &
  PIDS+=("$!")
  local i=0
  until [ -S "$s/kine.sock" ]; do
    i=$((i + 1)); [ "$i" -lt 300 ] || { log "kine did not listen"; exit 1; }
    sleep 0.1
  done
  "$BIN/kube-apiserver" \
    --etcd-servers="unix://$s/kine.sock" --storage-backend=etcd3 \
    --bind-address=0.0.0.0 --advertise-address="$address" --secure-port=6443 \
    --tls-cert-file="$tls/serving-kube-apiserver.crt" --tls-private-key-file="$tls/serving-kube-apiserver.key" \
    --client-ca-file="$tls/client-ca.crt" --token-auth-file="$s/cred/passwd" \
    --service-account-key-file="$tls/service.key" --service-account-signing-key-file="$tls/service.current.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local --api-audiences=https://kubernetes.default.svc.cluster.local,k3s \
    --service-cluster-ip-range="$(conf service-cidr)" --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction --anonymous-auth=false --profiling=false \
    --cert-dir="$tls/temporary-certs" --kubelet-certificate-authority="$tls/server-ca.crt" \
    --endpoint-reconciler-type=lease --watch-cache=false --v=0 &
  PIDS+=("$!")
  i=0
  until "$BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" --request-timeout=5s get --raw /readyz >/dev/null 2>&1; do
    i=$((i + 1)); [ "$i" -lt 240 ] || { log "kube-apiserver not ready after 120 s"; exit 1; }
    kill -0 "${PIDS[1]}" 2>/dev/null || { log "kube-apiserver exited"; exit 1; }
    sleep 0.5
  done
  log "kube-apiserver $K8S_VERSION ready on https://$address:6443 (kine on $s/db/state.db)"
  # what K3s's deploy controller does with server/manifests (here: the agents' RBAC)
  local m
  for m in "$s"/manifests/*.yaml; do
    [ -f "$m" ] || continue
    "$BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" apply -f "$m" >/dev/null || log "applying $m failed"
  done
  agent_loop "https://127.0.0.1:6443" "$token"
}

agent() {
  : "${K3S_URL:?K3S_URL is not set (/etc/systemd/system/k3s-agent.service.env)}"
  : "${K3S_TOKEN:?K3S_TOKEN is not set (/etc/systemd/system/k3s-agent.service.env)}"
  agent_loop "$K3S_URL" "$K3S_TOKEN"
}

case "${1:-}" in
  server) ROLE=server; trap stop_children TERM INT; server ;;
  agent) ROLE=agent; trap stop_children TERM INT; agent ;;
  kubectl) shift; exec "$BIN/kubectl" --kubeconfig "${KUBECONFIG:-$ADMIN_KUBECONFIG}" "$@" ;;
  --version|-v|version) echo "k3s version $K3S_VERSION (gpu-fleet lab: kine + kube-apiserver $K8S_VERSION)" ;;
  *) echo "usage: k3s server | agent | kubectl ARGS... | --version" >&2; exit 2 ;;
esac
