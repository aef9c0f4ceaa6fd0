"""The lab's private bridge: the hosts' veths attach to it, this machine is .1 on it."""

from __future__ import annotations

from pathlib import Path

from .common import run
from .hosts import BRIDGE, BRIDGE_ADDR, PREFIXLEN


def bridge_exists() -> bool:
    """Asked over netlink, in this process's network namespace: /sys/class/net shows the one
    that mounted /sys, which a second lab (its own namespace, this mount namespace) does not own."""
    return run(["ip", "-o", "link", "show", "dev", BRIDGE], check=False).returncode == 0


def ensure_bridge() -> None:
    if not bridge_exists():
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    # Link-local IPv6 chatter has no use on the lab net.
    v6 = Path(f"/proc/sys/net/ipv6/conf/{BRIDGE}/disable_ipv6")
    if v6.exists():
        v6.write_text("1\n")
    addrs = run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE]).stdout
    if f" {BRIDGE_ADDR}/{PREFIXLEN} " not in addrs:
        run(["ip", "addr", "add", f"{BRIDGE_ADDR}/{PREFIXLEN}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def bridge_ports() -> list[str]:
    """The links attached to the bridge: the host ends of the hosts' veths."""
    out = run(["ip", "-o", "link", "show", "master", BRIDGE], check=False).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.count(":") >= 2]


def delete_bridge() -> None:
    """The bridge and its veths. A killed host's veth lives on until the kernel has torn its
    namespace down, which a process stuck on the host's FUSE mount can delay by a minute; until
    then the next boot of that host fails on the name ("Failed to add new veth interfaces
    (vb-storage:host0): File exists")."""
    if bridge_exists():
        for port in bridge_ports():
            run(["ip", "link", "del", port], check=False)
        run(["ip", "link", "del", BRIDGE], check=False)
