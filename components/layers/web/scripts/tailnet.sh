#!/bin/bash
# The gateway's tailnet exposure, one change at a time. $1 action, $2 the change's directory,
# $3 the tailnet interface, $4 its address, $5 the gateway's port, $6 the gateway container.
#   baseline: refuse unless the interface holds the address; write baseline.json once (what the
#             gateway published and what listened before the change) and print it;
#   opened:   the port answers on the tailnet address and on loopback, and is refused on every
#             other address of the host (LAN included); then the marker is written;
#   closed:   (rollback) the port is refused on the tailnet address and still answers on
#             loopback; then the marker is removed (the baseline stays);
#   probe:    read-only: prints `marker yes|no` and each address's state.
# A listing is captured before grep -q reads it: under pipefail, grep's early exit would kill a
# producer still writing (SIGPIPE) and fail the check on what it was looking for (the seed's R2).
set -euo pipefail
action=$1 dir=$2 iface=$3 addr=$4 port=$5 name=$6
states() {
  IFACE=$iface ADDR=$addr PORT=$port python3 - <<'PY'
import os, socket, subprocess
port, tail, iface = int(os.environ["PORT"]), os.environ["ADDR"], os.environ["IFACE"]
addrs = {"127.0.0.1": "loopback", tail: "tailnet"}
for line in subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True).stdout.splitlines():
    f = line.split()
    if len(f) > 3 and f[2] in ("inet", "inet6") and not f[1].startswith(("lo", "podman", "veth", iface)):
        a = f[3].split("/")[0]
        if not a.startswith("fe80"):
            addrs.setdefault(a, "other")
for a, kind in addrs.items():
    s = socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET)
    s.settimeout(3)
    try:
        s.connect((a, port)); state = "open"
    except OSError as e:
        state = type(e).__name__
    finally:
        s.close()
    print(kind, a, state)
PY
}
case $action in
  baseline)
    held=$(ip -o addr show dev "$iface" 2>/dev/null || true)
    if ! grep -qwF -- "$addr" <<<"$held"; then
      echo "interface $iface does not hold $addr: the tailnet is not up on this host" >&2
      exit 1
    fi
    install -d -m 0755 "$dir"
    if [ ! -e "$dir/baseline.json" ]; then
      published=$(podman container inspect -f '{{json .HostConfig.PortBindings}}' "$name" 2>/dev/null || echo null)
      listen=$(ss -Hltn | awk '{print $4}' | sort -u | tr '\n' ' ')
      printf '{"published": %s, "listening": "%s", "at": "%s"}\n' "$published" "$listen" "$(date -u +%FT%TZ)" \
        >"$dir/baseline.json"
      chmod 0444 "$dir/baseline.json"
    fi
    cat "$dir/baseline.json"
    ;;
  opened)
    out=$(states)
    echo "$out"
    grep -qxF "tailnet $addr open" <<<"$out" || { echo "port $port does not answer on $addr" >&2; exit 1; }
    grep -qxF "loopback 127.0.0.1 open" <<<"$out" || { echo "port $port does not answer on loopback" >&2; exit 1; }
    if grep -q "^other [^ ]* open$" <<<"$out"; then
      echo "port $port answers on another address of the host" >&2; exit 1
    fi
    date -u +%FT%TZ >"$dir/exposed"
    ;;
  closed)
    out=$(states)
    echo "$out"
    if grep -qxF "tailnet $addr open" <<<"$out"; then
      echo "port $port still answers on $addr" >&2; exit 1
    fi
    rm -f "$dir/exposed"
    ;;
  probe)
    if [ -e "$dir/exposed" ]; then echo "marker yes"; else echo "marker no"; fi
    states
    ;;
esac
