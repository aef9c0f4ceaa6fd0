"""HealthReport: what Slurm and each node's health check say now, read on create and on refresh.

A read, never a change: its inputs are the nodes and the files it reads, so `diff` sees a
change only when those do, and `pulumi refresh` records every node's Slurm state and reason and
its health check's last result as outputs (the stack output `health`) without making the next
`up` do anything. One `scontrol show node -o` on the controller, one `cat` a node (fanned out).
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from ...errors import FleetError
from ...facts.scontrol import parse_show_oneliner
from ...providers.parts import Props, _entry, conn_change, kind_of, target_of
from ...transport import FanOutError, SshTarget, connection, fan_out
from .render import QUARANTINED

#: between the node's files in one `cat`
_SEP = "--gpu-fleet-health--"


def node_report(slurm: dict[str, str], result: Optional[dict], reboots: Optional[list]) -> dict[str, Any]:
    """One node's entry of the `health` output (pure)."""
    reason = slurm.get("Reason", "")
    reason = reason.rsplit(" [", 1)[0] if reason.endswith("]") else reason
    return {"state": slurm.get("State", "UNKNOWN"), "reason": reason,
            "quarantined": reason.startswith(QUARANTINED),
            "check": None if result is None else {
                "ok": result.get("ok"), "at": result.get("time"), "failures": result.get("failures", {}),
                "actions": [a.get("action") for a in result.get("actions", [])]},
            "reboots": sorted(reboots or [])}


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def report(props: Props) -> dict[str, Any]:
    ctl = connection(target_of(props))
    ctl.connect()
    shown = ctl.run(["scontrol", "show", "node", "-o"], mutating=False, check=False, timeout=60)
    slurm = {n.get("NodeName", ""): n for n in parse_show_oneliner(shown.stdout)}
    files = [props["result_file"], props["reboots_file"]]
    argv = ["sh", "-c", f'for f in "$@"; do cat "$f" 2>/dev/null; echo {_SEP}; done', "sh", *files]

    def read(c):
        c.connect()
        return c.run(argv, mutating=False, check=False, timeout=30).stdout

    try:
        out = fan_out([SshTarget.from_dict(n) for n in props["nodes"]], read, max_parallel=int(props["max_parallel"]))
    except FanOutError as e:
        raise FleetError(f"health report: not every node could be read over SSH:\n{e}") from None
    nodes = {}
    for n in props["nodes"]:
        parts = out.get(n["name"], "").split(_SEP + "\n")
        nodes[n["name"]] = node_report(slurm.get(n["name"], {}), _json(parts[0]) if parts else None,
                                       _json(parts[1]) if len(parts) > 1 else None)
    return {"nodes": nodes, "quarantined": sorted(n for n, r in nodes.items() if r["quarantined"]),
            "healthy": sorted(n for n, r in nodes.items() if r["check"] and r["check"]["ok"])}


class HealthReportProvider(ResourceProvider):
    serialize_as_secret_always = False

    @_entry
    def create(self, props: Props) -> CreateResult:
        return CreateResult(id_=f"{target_of(props).name}:health-report", outs={**props, "health": report(props)})

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        return UpdateResult(outs={**news, "health": report(news)})

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        how = conn_change(kind_of(self), _id, olds, news)
        inputs = ("nodes", "result_file", "reboots_file", "triggers")
        changed = bool(how) or any(olds.get(k) != news.get(k) for k in inputs)
        return DiffResult(changes=changed, replaces=["conn"] if how == "replace" else [], stables=[],
                          delete_before_replace=True)

    @_entry
    def read(self, id_: str, props: Props) -> ReadResult:
        return ReadResult(id_=id_, outs={**props, "health": report(props)})

    def delete(self, _id: str, props: Props) -> None:
        return None


class HealthReport(Resource, module="health", name="HealthReport"):
    health: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, nodes: list[dict], result_file: str, reboots_file: str,
                 max_parallel: int, triggers: dict, opts: Optional[pulumi.ResourceOptions] = None):
        """`conn`: the controller's (scontrol); `nodes`: every Slurm node's conn."""
        super().__init__(HealthReportProvider(), name,
                         {"conn": conn, "nodes": nodes, "result_file": result_file, "reboots_file": reboots_file,
                          "max_parallel": max_parallel, "triggers": triggers, "health": None}, opts)
