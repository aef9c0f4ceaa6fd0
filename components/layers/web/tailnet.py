"""The gateway on the tailnet: a change of its own (the seed's tailnet step), around the
gateway's recreate with the extra published address.

`web:TailnetBaseline` runs before the gateway changes: it refuses when the tailnet interface
does not hold the address, and writes once what was published and listening before the change
(`<TAILNET_DIR>/<change>/baseline.json`). `web:TailnetExposure` runs after: the port must answer
on the tailnet address and on loopback (the SSH tunnel keeps working) and be refused on every
other address of the host; then the change's marker is written. Its delete is the rollback
(the section removed: the gateway is recreated on loopback only first): the port must be closed
on the tailnet address and still open on loopback; the marker goes, the baseline stays.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from ...providers.base import RolloutCheck
from ...providers.parts import Props
from .container import WebProvider
from .remote import TAILNET, connect, bash


def _run(props: Props, action: str, mutating: bool) -> str:
    return connect(props["conn"]).run(
        bash(TAILNET, action, f"{props['dir']}/{props['change_id']}", props["interface"], props["address"],
           str(props["port"]), props["gateway"]), mutating=mutating).stdout


def parse_states(stdout: str) -> dict[str, Any]:
    marker, states = False, {}
    for line in stdout.splitlines():
        f = line.split()
        if f[:1] == ["marker"]:
            marker = f[1] == "yes"
        elif len(f) == 3:
            states[f[1]] = {"kind": f[0], "state": f[2]}
    return {"marker": marker, "states": states}


def exposed_as_declared(seen: dict[str, Any], address: str) -> bool:
    s = seen["states"]
    return (seen["marker"] and s.get(address, {}).get("state") == "open"
            and s.get("127.0.0.1", {}).get("state") == "open"
            and not any(v["kind"] == "other" and v["state"] == "open" for v in s.values()))


class TailnetBaselineProvider(RolloutCheck):
    rerun_on = ("change_id", "address", "interface")

    def key(self, props: Props) -> str:
        return f"web-tailnet-baseline:{props['change_id']}"

    def run(self, props: Props) -> dict[str, Any]:
        return {"baseline": json.loads(_run(props, "baseline", True).strip().splitlines()[-1])}


class TailnetBaseline(Resource, module="web", name="TailnetBaseline"):
    baseline: pulumi.Output[dict]

    def __init__(self, name: str, *, props: dict, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(TailnetBaselineProvider(), name, {**props, "baseline": None}, opts)


class TailnetExposureProvider(WebProvider):
    """A change ID, address or interface of its own is another exposure: the old one's rollback
    (delete) runs first."""
    delete_before_replace = True
    replace_on = ("change_id", "address", "interface")

    def id_of(self, props: Props) -> str:
        return f"{props['conn']['name']}:web-tailnet:{props['change_id']}"

    def converge(self, props: Props, record: Props) -> Props:
        return {**props, "seen": parse_states(_run(props, "opened", True)), "exposed": True}

    def drifted(self, olds: Props, news: Props) -> bool:
        return olds.get("exposed") is not True or olds.get("port") != news.get("port")

    def observe(self, props: Props) -> Props:
        seen = parse_states(_run(props, "probe", False))
        return {"seen": seen, "exposed": exposed_as_declared(seen, props["address"])}

    def undo(self, props: Props) -> None:
        _run(props, "closed", True)


class TailnetExposure(Resource, module="web", name="TailnetExposure"):
    exposed: pulumi.Output[bool]
    seen: pulumi.Output[dict]

    def __init__(self, name: str, *, props: dict, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(TailnetExposureProvider(), name, {**props, "exposed": None, "seen": None}, opts)
