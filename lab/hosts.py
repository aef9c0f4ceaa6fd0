"""The lab's hosts: names, addresses and roles (fixed, so stack files can be committed)."""

from __future__ import annotations

from dataclasses import dataclass, field

BRIDGE = "gflab0"
NET = "10.213.57"
PREFIXLEN = 24
SUBNET = f"{NET}.0/{PREFIXLEN}"
BRIDGE_ADDR = f"{NET}.1"
BRIDGE_NAME = "labhost"  # how the hosts name this machine in /etc/hosts
DEFAULT_NODES = 3
MAX_NODES = 30
CGROUP_PARENT = "gpu-fleet-lab"


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    roles: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        return {"name": self.name, "address": self.address, "roles": list(self.roles)}


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
