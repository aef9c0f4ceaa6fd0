#!/usr/bin/python3
"""TEST DOUBLE of containerd-shim-runc-v2 on a lab node (lab/k3s.py installs it as
/var/lib/rancher/k3s/data/<key>/bin/containerd-shim-runc-v2; the lab's k3s starts it).

What a real pod's shim does to a node that matters when K3s is retired: it is a detached
process, outside the K3s service's main process, that holds the node's GPU devices open until
it is killed (KillMode=process: `systemctl stop k3s` leaves it running). The devices are the
lab's fake GPUs (/dev/fakegpuN, character devices without a driver behind them), so they are
held with O_PATH descriptors: they show in /proc/<pid>/fd and in fuser like any open device.
Its arguments are the real shim's (-namespace, -id, -address); GPU_DEVICES names the devices.
"""

import os
import signal
import sys

fds = []
for dev in os.environ.get("GPU_DEVICES", "").split():
    try:
        fds.append(os.open(dev, os.O_PATH))
    except OSError as e:
        print(f"containerd-shim-runc-v2 (lab double): cannot hold {dev}: {e}", file=sys.stderr)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
while True:
    signal.pause()
