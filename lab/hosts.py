"""The lab's hosts: names, addresses and roles (fixed, so stack files can be committed)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

BRIDGE = "gflab0"
NET = "10.213.57"
PREFIXLEN = 24
SUBNET = f"{NET}.0/{PREFIXLEN}"
BRIDGE_ADDR = f"{NET}.1"
BRIDGE_NAME = "labhost"  # how the hosts name this machine in /etc/hosts
DEFAULT_NODES = 3
MAX_NODES = 30
DEFAULT_LAB = "gpu-fleet-lab"
#: Which lab this is. A second lab (scripts/lab-ns.sh: `make test` runs half the lab tests on
#: it) sets GPU_FLEET_LAB_NAME and lives in a network namespace of its own, so its bridge and
#: addresses are these same ones; what it shares with the first is this machine's cgroup
#: hierarchies and nspawn's per-machine directories, named after it.
LAB_NAME = os.environ.get("GPU_FLEET_LAB_NAME") or DEFAULT_LAB
CGROUP_PARENT = LAB_NAME


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    roles: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        return {"name": self.name, "address": self.address, "roles": list(self.roles)}


def machine_name(host: str) -> str:
    """The host's nspawn machine name (its hostname is /etc/hostname's, the host name in both labs)."""
    return host if LAB_NAME == DEFAULT_LAB else f"{LAB_NAME}-{host}"


def lab_hosts(nodes: int = DEFAULT_NODES) -> list[Host]:
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"--nodes must be between 1 and {MAX_NODES} (got {nodes})")
    hosts = [
        Host("storage", f"{NET}.10", ("storage",)),
        Host("ctl", f"{NET}.11", ("controller",)),
    ]
    for k in range(1, nodes + 1):
        roles = ("node", "canary") if k == 1 else ("node",)
        hosts.append(Host(f"node{k}", f"{NET}.{20 + k}", roles))
    return hosts


def etc_hosts(hosts: list[Host]) -> str:
    lines = [
        "# written by the gpu-fleet lab (python -m lab up)",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "ff02::1\tip6-allnodes",
        "ff02::2\tip6-allrouters",
        f"{BRIDGE_ADDR}\t{BRIDGE_NAME}",
    ]
    lines += [f"{h.address}\t{h.name}" for h in hosts]
    return "\n".join(lines) + "\n"
