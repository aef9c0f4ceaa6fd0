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


def delete_bridge() -> None:
    if bridge_exists():
        run(["ip", "link", "del", BRIDGE], check=False)
