"""LentReservation: a standing Slurm reservation with `Flags=REPLACE_DOWN` that borrows spares.

Slurm fills it with `NodeCnt` nodes of its partition, the lightest first (spares weigh more), and
every so often (slurmctld's periodic check, about 30 s) replaces a node of it that is down or
drained with a free node of the partition, which is a spare once the regular nodes are taken.
Slurm does not give the spare back when the node returns: it keeps serving the reservation.

The nodes it first held are recorded (`lent_from`), so a read can say which spare stands in for
which node (`standing_in`); refresh reads it again. Delete removes only a reservation this stack
created (a reservation is no data; Slurm may refuse to delete one that jobs use, and says why).
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from ...errors import FleetError
from ...facts.scontrol import parse_show_oneliner
from ...kit import sh
from ...providers.base import HostPrimitive
from ...providers.parts import Observed, Props, Step
from ...scripts import script

_PROBE = script(__file__, "reservation_probe.sh")
FLAG = "REPLACE_DOWN"


def parse_reservation(stdout: str) -> Observed:
    """The probe's output -> {present, fields, nodes} (pure)."""
    if stdout.strip() == "absent":
        return {"present": False, "fields": {}, "nodes": []}
    head, _, names = stdout.partition("== hostnames\n")
    shown = parse_show_oneliner(head)
    return {"present": bool(shown), "fields": shown[0] if shown else {},
            "nodes": [n.strip() for n in names.splitlines() if n.strip()]}


def _names(value: Optional[str]) -> list[str]:
    return sorted(v for v in (value or "").split(",") if v and v != "(null)")


def standing_in(spares: list[str], lent_from: list[str], nodes: list[str]) -> dict[str, str]:
    """Spare -> the node it stands in for: the spares the reservation holds now, paired in order
    with the nodes it first held and no longer does (pure)."""
    gone = [n for n in lent_from if n not in nodes]
    serving = [n for n in nodes if n in spares and n not in lent_from]
    return dict(zip(serving, gone))


class LentReservationProvider(HostPrimitive):
    replace_on = ("name", "partition")
    record_keys = ("existed", "lent_from")

    def key(self, props: Props) -> str:
        return f"reservation {props['name']}"

    def probe_argv(self, props: Props) -> list[str]:
        return sh(_PROBE, props["name"])

    def parse(self, props: Props, stdout: str) -> Observed:
        return parse_reservation(stdout)

    def desired(self, props: Props) -> dict[str, Any]:
        return {"present": True, "partition": props["partition"], "node_count": int(props["node_count"]),
                "replace_down": True, "users": sorted(props.get("users") or []),
                "accounts": sorted(props.get("accounts") or [])}

    def state(self, props: Props, obs: Observed) -> dict[str, Any]:
        f = obs["fields"]
        count = f.get("NodeCnt", "")
        lent_from = props.get("lent_from") or obs["nodes"]
        return {"present": obs["present"], "partition": f.get("PartitionName"),
                "node_count": int(count) if count.isdigit() else None,
                "replace_down": FLAG in (f.get("Flags") or "").split(","),
                "users": _names(f.get("Users")), "accounts": _names(f.get("Accounts")),
                "nodes": obs["nodes"],
                "standing_in": standing_in(props.get("spares") or [], lent_from, obs["nodes"])}

    def remember(self, props: Props, before: Observed) -> Props:
        return {"existed": before["present"]}

    def _who(self, props: Props) -> list[str]:
        return ([f"Users={','.join(props['users'])}"] if props.get("users") else []) + (
            [f"Accounts={','.join(props['accounts'])}"] if props.get("accounts") else [])

    def plan(self, props: Props, obs: Observed, record: Props) -> list[Step]:
        name = props["name"]
        if not obs["present"]:
            return [Step(["scontrol", "create", "reservation", f"ReservationName={name}",
                          f"PartitionName={props['partition']}", f"NodeCnt={props['node_count']}",
                          "StartTime=now", "Duration=UNLIMITED", f"Flags={FLAG}", *self._who(props)],
                         f"create the lent reservation {name}")]
        want, have = self.desired(props), self.state(props, obs)
        if have["partition"] != want["partition"]:
            # a reservation found under the name, drawing from another partition: not ours to move
            raise FleetError(f"reservation {name} exists with PartitionName={have['partition']}, the stack says "
                             f"{want['partition']}: delete it (scontrol delete ReservationName={name}) or give "
                             "the stack's another name")
        steps = []
        if not have["replace_down"]:
            steps.append(Step(["scontrol", "update", f"ReservationName={name}", f"Flags+={FLAG}"],
                              f"{name}: replace nodes that go down or drained"))
        change = []
        if have["node_count"] != want["node_count"]:
            change.append(f"NodeCnt={want['node_count']}")
        if (have["users"], have["accounts"]) != (want["users"], want["accounts"]):
            change += self._who(props)
        if change:
            steps.append(Step(["scontrol", "update", f"ReservationName={name}", *change], f"update {name}"))
        return steps

    def applied(self, props: Props, record: Props, before: Observed, after: Observed,
                ran: list[Step]) -> Props:
        """The nodes it first held are those right after its creation (or a change of its count)."""
        if not record.get("lent_from") or before["fields"].get("NodeCnt") != after["fields"].get("NodeCnt"):
            record = {**record, "lent_from": after["nodes"]}
        return self.outputs(props, record, after)

    def plan_delete(self, props: Props, obs: Observed) -> list[Step]:
        if props.get("existed") or not obs["present"]:
            return []
        return [Step(["scontrol", "delete", f"ReservationName={props['name']}"],
                     f"delete the lent reservation {props['name']}")]


class LentReservation(Resource, module="health", name="LentReservation"):
    """`conn`: the controller's; `spares`: the stack's spare nodes (to say who stands in)."""

    nodes: pulumi.Output[list]
    standing_in: pulumi.Output[dict]
    lent_from: pulumi.Output[list]

    def __init__(self, name: str, *, conn: dict, reservation: str, partition: str, node_count: int,
                 users: list[str], accounts: list[str], spares: list[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(LentReservationProvider(), name,
                         {"conn": conn, "name": reservation, "partition": partition, "node_count": node_count,
                          "users": users, "accounts": accounts, "spares": spares,
                          "nodes": None, "standing_in": None, "lent_from": None}, opts)
