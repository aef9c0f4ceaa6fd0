"""Run on a lab node by `python -m lab k3s status` (lab/k3s.py): one JSON object, what K3s left
on this node: its role, the K3s and workload-database units (active/enabled), the
containerd-shim-runc-v2 processes with the GPU devices each holds, and what is mounted under
the kubelet, rancher and /run/k3s paths."""

import json
import os
import subprocess

UNITS = ("k3s", "k3s-agent", "postgresql@15-main")
BASES = ("/var/lib/kubelet", "/var/lib/rancher", "/run/k3s")


def systemctl(verb, unit):
    p = subprocess.run(["systemctl", verb, unit + ".service"], capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def shims():
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "containerd-shim":
                    continue
            fds = []
            for fd in os.listdir(f"/proc/{pid}/fd"):
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
                if t.startswith("/dev/") and t != "/dev/null" and not t.startswith("/dev/pts"):
                    fds.append(t)
            out.append({"pid": int(pid), "devices": sorted(fds)})
        except OSError:
            continue
    return out


def mounts():
    found = []
    with open("/proc/self/mounts") as f:
        for line in f:
            mp = line.split()[1].replace("\\040", " ")
            if any(mp == b or mp.startswith(b + "/") for b in BASES):
                found.append({"target": mp, "fstype": line.split()[2]})
    return found


role = "server" if os.path.exists("/etc/systemd/system/k3s.service") else (
    "agent" if os.path.exists("/etc/systemd/system/k3s-agent.service") else None)
print(json.dumps({
    "role": role,
    "services": {u: {"active": systemctl("is-active", u), "enabled": systemctl("is-enabled", u)} for u in UNITS},
    "shims": shims(),
    "mounts": mounts(),
}))
