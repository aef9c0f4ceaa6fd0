"""slurmdbd reachable only from loopback, the controller and the compute network.

slurmdbd listens on every address (it has no bind option), so the seed's rule is
enforced in the controller's kernel: an nftables table of our own admits TCP
6819 from the allowed sources and resets everything else. A oneshot unit loads
it and slurmdbd `Requires=` that unit, so slurmdbd never serves without it, also
after a reboot. nftables rather than systemd's IPAddressDeny: cgroup-BPF address
filters are not enforced in every container (the lab's nspawn hosts ignore
them), and a ruleset can be read back from the kernel.

Verified from both sides on every rollout of the layer (`DbdReachability`):
every node connects to slurmdbd, and every stack host outside the allowed
sources is refused. Refresh compares the loaded table with what the unit loaded,
so a flushed or edited table is noticed and reloaded by the next `up`. A new
ruleset is loaded by `systemctl reload` (one atomic `nft -f`): a restart of the
unit would restart slurmdbd too (`Requires=` propagates restarts) and leave the
verification racing slurmdbd's start, which the reachability check also waits out.
"""

from __future__ import annotations

import ipaddress
from typing import Optional, Sequence

import pulumi
from pulumi.dynamic import Resource

from ...config.hosts import Hosts, HostSpec, NodeSpec
from ...errors import FleetError
from ...providers.base import RolloutCheck
from ...providers.parts import Props, target_of
from ..slurm.render import HEADER
from .config import AccountingLayer
from ...transport import FanOutError, SshTarget, connection, fan_out

DBD_PORT = 6819
TABLE = "gpu_fleet_slurmdbd"
RULES_PATH = "/etc/gpu-fleet/slurmdbd-firewall.nft"
UNIT = "gpu-fleet-slurmdbd-firewall.service"
#: the hash of the table as the unit loaded it (refresh compares the live table with it)
LOADED_SHA = "/run/gpu-fleet-slurmdbd-firewall.sha256"
_LIST = f"nft -s list table inet {TABLE}"


def allowed_sources(a: AccountingLayer, hosts: Hosts, nodes: Sequence[NodeSpec]) -> list[str]:
    """The networks that may reach slurmdbd: `accounting.dbd_clients` and every node and
    the controller given by IP address (the controller's own traffic also arrives on lo)."""
    nets = list(a.dbd_clients)
    for h in [hosts.controller, *nodes]:
        try:
            nets.append(ipaddress.ip_network(h.address))
        except ValueError:
            pass  # a DNS name: config validation demands dbd_clients then
    v4 = [n for n in nets if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in nets if isinstance(n, ipaddress.IPv6Network)]
    return [str(n) for n in ipaddress.collapse_addresses(v4)] + [str(n) for n in ipaddress.collapse_addresses(v6)]


def outsiders(a: AccountingLayer, hosts: Hosts, nodes: Sequence[NodeSpec]) -> list[HostSpec]:
    """Stack hosts (by IP) outside the allowed sources: each must be refused."""
    nets = [ipaddress.ip_network(s) for s in allowed_sources(a, hosts, nodes)]
    by_name = {h.name: h for h in [hosts.storage, hosts.controller, *nodes]}
    out = []
    for h in by_name.values():
        try:
            addr = ipaddress.ip_address(h.address)
        except ValueError:
            continue
        if not any(addr in n for n in nets if n.version == addr.version):
            out.append(h)
    return out


def render_ruleset(sources: list[str]) -> str:
    """The table, replaced atomically: one `nft -f` transaction declares, deletes, redefines."""
    v4 = [s for s in sources if ipaddress.ip_network(s).version == 4]
    v6 = [s for s in sources if ipaddress.ip_network(s).version == 6]
    rules = ['iif "lo" accept']
    if v4:
        rules.append(f"tcp dport {DBD_PORT} ip saddr {{ {', '.join(v4)} }} accept")
    if v6:
        rules.append(f"tcp dport {DBD_PORT} ip6 saddr {{ {', '.join(v6)} }} accept")
    rules.append(f"tcp dport {DBD_PORT} reject with tcp reset")
    body = "\n".join(f"\t\t{r}" for r in rules)
    return (f"{HEADER}\ntable inet {TABLE}\ndelete table inet {TABLE}\n"
            f"table inet {TABLE} {{\n\tchain input {{\n"
            f"\t\ttype filter hook input priority filter; policy accept;\n{body}\n\t}}\n}}\n")


def render_unit() -> str:
    return (
        "[Unit]\nDescription=gpu-fleet: slurmdbd's port only from its allowed sources (nftables)\n"
        # after nftables.service: its /etc/nftables.conf starts with `flush ruleset`
        "After=nftables.service\nBefore=slurmdbd.service\n\n[Service]\nType=oneshot\n"
        "RemainAfterExit=yes\n"
        f"ExecStart=/usr/sbin/nft -f {RULES_PATH}\n"
        f"ExecStartPost=/bin/sh -c '{_LIST} | sha256sum > {LOADED_SHA}'\n"
        # a new ruleset replaces the table in one transaction; slurmdbd keeps running
        f"ExecReload=/usr/sbin/nft -f {RULES_PATH}\n"
        f"ExecReload=/bin/sh -c '{_LIST} | sha256sum > {LOADED_SHA}'\n"
        f"ExecStop=/usr/sbin/nft delete table inet {TABLE}\n"
        f"ExecStopPost=/bin/rm -f {LOADED_SHA}\n\n"
        "[Install]\nWantedBy=multi-user.target\n")


#: slurmdbd's drop-in: it starts only with the firewall loaded and stops if it goes
DBD_DROPIN = f"[Unit]\nRequires={UNIT}\nAfter={UNIT}\n"

#: read-only: exit 0 when the live table is the one the unit loaded
VERIFY_LOADED = ["sh", "-c", f"{_LIST} 2>/dev/null | sha256sum | cmp -s - {LOADED_SHA}"]
#: loads the rules file: a reload when the unit runs (slurmdbd untouched), else a start
LOAD = ["systemctl", "reload-or-restart", UNIT]

#: read-only: exit 0 when slurmdbd's port has a listener
LISTENING = ["sh", "-c", f'ss -Hltn "sport = :{DBD_PORT}" | grep -q .']
#: read-only: wait up to 60 s for that listener (slurmdbd may be starting)
WAIT_LISTENING = ["sh", "-c", f'for i in $(seq 60); do ss -Hltn "sport = :{DBD_PORT}" | grep -q . && exit 0; '
                  f'sleep 1; done; echo "slurmdbd is not listening on {DBD_PORT} after 60 s" >&2; exit 1']

# $1 address, $2 port: one TCP connect from this host, 5 s at most.
_CONNECT = 'timeout 5 bash -c \'exec 3<>"/dev/tcp/$1/$2"\' _ "$1" "$2" 2>&1; echo "rc $?"'


def connect_from(conn, address: str, port: int) -> tuple[bool, str]:
    """(connected, what the host said): a TCP connect from the host behind `conn`. A host
    that answers nothing raises: a silent host must not count as a refused one."""
    conn.connect()
    res = conn.run(["sh", "-c", _CONNECT, "sh", address, str(port)], mutating=False, check=False)
    lines = res.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("rc "):
        raise FleetError(f"host {conn.t.name}: the connect probe to {address}:{port} gave no "
                         f"verdict (exit {res.rc}): {(res.stdout + res.stderr).strip()}")
    rc = lines[-1].split()[-1]
    said = " ".join(lines[:-1]).strip() or ("timed out" if rc == "124" else f"exit {rc}")
    return rc == "0", said


def judge_reachability(address: str, port: int, clients: dict[str, tuple[bool, str]],
                       outside: dict[str, tuple[bool, str]]) -> list[str]:
    """Pure: every client must connect, every outsider must be refused."""
    fails = [f"{h} cannot reach slurmdbd at {address}:{port} ({said})"
             for h, (ok, said) in sorted(clients.items()) if not ok]
    fails += [f"{h} reaches slurmdbd at {address}:{port} although it is outside the allowed "
              "sources: the firewall does not hold" for h, (ok, _) in sorted(outside.items()) if ok]
    return fails


class DbdReachabilityProvider(RolloutCheck):
    """Positive and negative connects to slurmdbd, fanned out over the hosts."""

    def key(self, props: Props) -> str:
        return "dbd-reachability"

    def run(self, props: Props) -> dict:
        address, port = props["address"], int(props["port"])
        ctl = connection(target_of(props))
        ctl.connect()
        up = ctl.run(WAIT_LISTENING, mutating=False, check=False)
        if up.rc != 0:
            raise FleetError(f"host {ctl.t.name}: slurmdbd access verification failed: "
                             f"{(up.stdout + up.stderr).strip()}")
        targets = {t.name: t for t in (SshTarget.from_dict(c) for c in props["clients"] + props["outsiders"])}
        try:
            said = fan_out(targets.values(), lambda c: connect_from(c, address, port),
                           max_parallel=int(props.get("max_parallel") or 16))
        except FanOutError as e:
            raise FleetError(f"slurmdbd reachability: cannot reach {len(e.failures)} host(s) over SSH:\n{e}") from None
        outside_names = {SshTarget.from_dict(c).name for c in props["outsiders"]}
        clients = {h: r for h, r in said.items() if h not in outside_names}
        outside = {h: r for h, r in said.items() if h in outside_names}
        fails = judge_reachability(address, port, clients, outside)
        if fails:
            raise FleetError(f"host {target_of(props).name}: slurmdbd access verification failed:\n  - "
                             + "\n  - ".join(fails))
        return {"reached_from": sorted(clients), "refused_from": sorted(outside)}


class DbdReachability(Resource, module="slurm", name="DbdReachability"):
    reached_from: pulumi.Output[list]
    refused_from: pulumi.Output[list]

    def __init__(self, name: str, *, conn: dict, address: str, clients: list[dict],
                 outsiders: list[dict], triggers: pulumi.Input[dict], max_parallel: int = 16,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(DbdReachabilityProvider(), name,
                         {"conn": conn, "address": address, "port": DBD_PORT, "clients": clients,
                          "outsiders": outsiders, "triggers": triggers, "max_parallel": max_parallel,
                          "reached_from": None, "refused_from": None}, opts)
