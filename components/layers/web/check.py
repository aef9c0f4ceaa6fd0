"""The web view verified as a client sees it, on the controller (check.sh): the page and the
read API answer through the gateway on loopback, every Slurm node is listed, write methods are
refused, the port is closed on the host's other addresses, and no TCP listener on the host
belongs to the agent or slurmrestd. It runs on every rollout of the containers (not on refresh).
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from ...errors import FleetError
from ...providers.base import RolloutCheck
from ...providers.parts import Props
from ...scripts import sections
from .remote import CHECK, connect as _c, bash
READS = ("/", "/api/nodes", "/api/partitions", "/api/jobs")
#: what the gateway may answer a write: forbidden or not allowed, never anything it executed
REFUSED = {"403", "405"}
#: processes that must never hold a TCP listener on the host
NEVER_LISTENING = ("slurmrestd", "python3", "slurm-web")


def parse_check(stdout: str) -> dict[str, Any]:
    sec = sections(stdout)
    http = {}
    for line in (sec.get("http") or "").splitlines():
        f = line.split()
        if len(f) == 3:
            http[f"{f[0]} {f[1]}"] = f[2]
    try:
        nodes = json.loads(sec.get("nodes") or "{}").get("nodes") or []
    except ValueError:
        nodes = []
    lan = dict(line.split(None, 1) for line in (sec.get("lan") or "").splitlines() if " " in line)
    listen = [line.split(None, 1) for line in (sec.get("listen") or "").splitlines() if line.strip()]
    return {"http": http, "page_has_nodes": "has-nodes-table True" in (sec.get("page") or ""),
            "nodes": nodes, "lan": lan, "listen": [[a, p[0] if p else ""] for a, *p in listen]}


def check_problems(seen: dict[str, Any], port: int, slurm_nodes: list[str],
                   tailnet: Optional[str] = None) -> list[str]:
    p = []
    for path in READS:
        got = seen["http"].get(f"GET {path}")
        if got != "200":
            p.append(f"GET http://127.0.0.1:{port}{path} answered {got}, not 200")
    if not seen["page_has_nodes"]:
        p.append("the page has no node table (id=\"nodes\")")
    for k, v in seen["http"].items():
        if not k.startswith("GET ") and v not in REFUSED:
            p.append(f"{k} through the gateway answered {v}: writes must be refused (403/405)")
    listed = {n.get("name") for n in seen["nodes"]}
    missing = [n for n in slurm_nodes if n not in listed]
    if missing:
        p.append(f"the agent does not list Slurm node(s) {', '.join(missing)}")
    for addr, how in sorted(seen["lan"].items()):
        if how == "open":
            p.append(f"port {port} answers on {addr}: it must listen on loopback only")
    for addr, proc in seen["listen"]:
        if any(f'"{x}"' in proc for x in NEVER_LISTENING):
            p.append(f"{proc} listens on TCP {addr}: the agent and slurmrestd must have no TCP listener on the host")
        allowed = ("127.0.0.1:", "[::1]:", *([f"{tailnet}:", f"[{tailnet}]:"] if tailnet else []))
        if addr.rsplit(":", 1)[-1] == str(port) and not addr.startswith(allowed):
            p.append(f"port {port} is bound on {addr}, not on loopback")
    return p


class WebCheckProvider(RolloutCheck):
    def key(self, props: Props) -> str:
        return "web-check"

    def run(self, props: Props) -> dict[str, Any]:
        conn = _c(props["conn"])
        seen = parse_check(conn.run(bash(CHECK, str(props["port"]), props.get("tailnet") or ""),
                                    mutating=False).stdout)
        bad = check_problems(seen, int(props["port"]), list(props["slurm_nodes"]), props.get("tailnet"))
        if bad:
            raise FleetError(f"web:Check: host {conn.t.name}: the web view failed its check:\n  - "
                             + "\n  - ".join(bad))
        return {"seen": {"http": seen["http"], "nodes": seen["nodes"], "lan": seen["lan"]}}


class WebCheck(Resource, module="web", name="Check"):
    seen: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, port: int, slurm_nodes: list[str], triggers: pulumi.Input[dict],
                 tailnet: Optional[str] = None, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(WebCheckProvider(), name, {"conn": conn, "port": port, "slurm_nodes": slurm_nodes,
                                                    "tailnet": tailnet, "triggers": triggers, "seen": None}, opts)
