"""Slurm-web verified as a visitor sees it, on the controller (check.sh): the UI's page and the
script it loads, the API address it is given, the anonymous token, every viewing action the stack
grants answering and every other refused (403), write methods refused, every Slurm node listed,
the port closed on the host's other addresses, no TCP listener on the host belonging to the
agent or slurmrestd, and the slurmrestd API the agent discovered (recorded in the stack output).
It runs on every rollout of the containers (not on refresh).
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
from .config import RESTD_APIS
from .remote import CHECK, connect as _c, bash

#: each agent view the gateway relays -> the action Slurm-web's policy names for it
VIEWS = {"stats": "view-stats", "jobs": "view-jobs", "nodes": "view-nodes", "partitions": "view-partitions",
         "qos": "view-qos", "reservations": "view-reservations", "accounts": "view-accounts",
         "associations": "associations-view", "cache/stats": "cache-view"}
#: calls that change something: refused (403 by the policy, 405 where no such method exists)
WRITES = {"POST {agents}/cache/reset", "POST {agents}/jobs", "DELETE {agents}/jobs", "PUT {agents}/nodes",
          "PATCH {agents}/partitions"}
REFUSED = {"403", "405"}
#: processes that must never hold a TCP listener on the host
NEVER_LISTENING = ("slurmrestd", "python3", "slurm-web")


def parse_check(stdout: str) -> dict[str, Any]:
    sec = sections(stdout)
    page: dict[str, Any] = {}
    for line in (sec.get("page") or "").splitlines():
        f = line.split()
        if f and f[0] == "index" and len(f) == 2:
            page["index"] = f[1]
        elif f and f[0] == "app" and len(f) == 2:
            page["app"] = f[1] == "True"
        elif f and f[0] == "asset" and len(f) == 3:
            page["asset"], page["asset_status"] = f[1], f[2]
    http = {}
    for line in (sec.get("http") or "").splitlines():
        f = line.split()
        if len(f) == 3:
            http[f"{f[0]} {f[1]}"] = f[2]

    def doc(name: str) -> list:
        try:
            v = json.loads(sec.get(name) or "[]")
        except ValueError:
            return []
        return v if isinstance(v, list) else []
    try:
        versions = json.loads(sec.get("versions") or "{}")
    except ValueError:
        versions = {}
    lan = dict(line.split(None, 1) for line in (sec.get("lan") or "").splitlines() if " " in line)
    listen = [line.split(None, 1) for line in (sec.get("listen") or "").splitlines() if line.strip()]
    return {"page": page, "api_server": (sec.get("config") or "").strip(), "http": http,
            "clusters": [c.get("name") for c in doc("clusters") if isinstance(c, dict)],
            "nodes": [{"name": n.get("name"), "state": n.get("state")} for n in doc("nodes") if isinstance(n, dict)],
            "versions": versions if isinstance(versions, dict) else {}, "lan": lan,
            "listen": [[a, p[0] if p else ""] for a, *p in listen]}


def check_problems(seen: dict[str, Any], *, port: int, cluster: str, url: str, actions: list[str],
                   slurm_nodes: list[str], tailnet: Optional[str] = None) -> list[str]:
    p = []
    page, http = seen["page"], seen["http"]
    if page.get("index") != "200" or not page.get("app"):
        p.append(f"GET http://127.0.0.1:{port}/ answered {page.get('index')} without Slurm-web's app element")
    elif page.get("asset_status") != "200":
        p.append(f"the page's script {page.get('asset')} answered {page.get('asset_status')}, not 200")
    if seen["api_server"].rstrip("/") != url.rstrip("/"):
        p.append(f"the UI is told to call the API at {seen['api_server']!r}, not {url!r} (web.public_url)")
    for call in ("GET /api/anonymous", "GET /api/version", "GET /api/clusters"):
        if http.get(call) != "200":
            p.append(f"{call} answered {http.get(call)}, not 200")
    if cluster not in seen["clusters"]:
        p.append(f"the gateway lists clusters {seen['clusters']}, not {cluster} (its agent unreachable?)")
    agents = f"/api/agents/{cluster}"
    ping, api = http.get(f"GET {agents}/ping"), seen["versions"].get("api")
    if ping != "200" or api not in RESTD_APIS:
        p.append(f"GET {agents}/ping answered {ping}, slurmrestd API {api!r}: "
                 f"the agent must have discovered one of {', '.join(RESTD_APIS)}")
    for view, action in VIEWS.items():
        got, want = http.get(f"GET {agents}/{view}"), "200" if action in actions else "403"
        if got != want:
            why = "granted" if want == "200" else "not granted"
            p.append(f"GET {agents}/{view} answered {got}, not {want} ({action} is {why} to anonymous)")
    for call in sorted(WRITES):
        call = call.format(agents=agents)
        if http.get(call) not in REFUSED:
            p.append(f"{call} through the gateway answered {http.get(call)}: writes must be refused (403/405)")
    listed = {n["name"] for n in seen["nodes"]}
    missing = [n for n in slurm_nodes if n not in listed]
    if "view-nodes" in actions and missing:
        p.append(f"Slurm-web does not list Slurm node(s) {', '.join(missing)}")
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
        seen = parse_check(conn.run(bash(CHECK, str(props["port"]), props.get("tailnet") or "", props["cluster"]),
                                    mutating=False, timeout=120).stdout)
        bad = check_problems(seen, port=int(props["port"]), cluster=props["cluster"], url=props["url"],
                             actions=list(props["actions"]), slurm_nodes=list(props["slurm_nodes"]),
                             tailnet=props.get("tailnet"))
        if bad:
            raise FleetError(f"web:Check: host {conn.t.name}: the web view failed its check:\n  - "
                             + "\n  - ".join(bad))
        return {"seen": {"http": seen["http"], "nodes": seen["nodes"], "clusters": seen["clusters"],
                         "api_server": seen["api_server"], "versions": seen["versions"], "lan": seen["lan"]}}


class WebCheck(Resource, module="web", name="Check"):
    seen: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, port: int, cluster: str, url: str, actions: list[str],
                 slurm_nodes: list[str], triggers: pulumi.Input[dict], tailnet: Optional[str] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(WebCheckProvider(), name, {
            "conn": conn, "port": port, "cluster": cluster, "url": url, "actions": actions,
            "slurm_nodes": slurm_nodes, "tailnet": tailnet, "triggers": triggers, "seen": None}, opts)
