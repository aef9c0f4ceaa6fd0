"""CommandWithVerify: a create/delete command pair whose effect a verify command proves.

For what has no richer primitive yet. `verify` is the probe (read-only, exit 0
means the effect is there), so refresh notices when the effect is gone and the
next up re-runs `create`. `create` re-runs otherwise only when its inputs
(`create` itself or `triggers`) change; a create that leaves verify failing
fails the deployment.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from ..transport.command import Piece
from .base import HostPrimitive, NotConverged, Observed, Props, Step, _entry


def inputs_hash(props: Props) -> str:
    blob = json.dumps({"create": props["create"], "triggers": props.get("triggers")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class CommandWithVerifyProvider(HostPrimitive):
    def key(self, props: Props) -> str:
        return "command:" + inputs_hash(props)[:12]

    def probe_argv(self, props: Props) -> list[Piece]:
        return ["sh", "-c", '"$@"; echo "verify-rc $?"', "sh", *props["verify"]]

    def parse(self, props: Props, stdout: str) -> Observed:
        rc = None
        for line in stdout.splitlines():
            if line.startswith("verify-rc "):
                rc = int(line.split()[1])
        return {"verified": rc == 0}

    def desired(self, props: Props) -> dict[str, Any]:
        return {"verified": True, "inputs_hash": inputs_hash(props)}

    def state(self, props: Props, obs: Observed) -> dict[str, Any]:
        return {"verified": obs["verified"]}

    def plan(self, props: Props, obs: Observed, record: Props) -> list[Step]:
        if obs["verified"] and not record.get("_force"):
            return []
        stdin = props.get("create_stdin")
        return [Step(props["create"], "create", stdin=stdin.encode() if stdin else None,
                     stdin_secret=bool(stdin))]

    record_keys = ("preexisting",)

    @_entry
    def create(self, props: Props):
        """An effect already in place before create (adopted) is not undone by destroy."""
        conn = self._conn(props)
        props = {**props, "preexisting": self.probe(conn, props)["verified"]}
        return super().create.__wrapped__(self, props)

    def apply(self, props: Props, record: Props) -> Props:
        conn = self._conn(props)
        if props.get("preexisting") is None and "preexisting" in record:
            props = {**props, "preexisting": record["preexisting"]}
        for step in self.plan(props, {"verified": False}, {"_force": True}):
            conn.run(step.argv, mutating=True, stdin=step.stdin, stdin_secret=step.stdin_secret)
        if not self.probe(conn, props)["verified"]:
            raise NotConverged(f"host {conn.t.name}: verify command failed after create")
        return {**{k: v for k, v in props.items() if k != "create_stdin"}, "verified": True,
                "inputs_hash": inputs_hash(props)}

    def plan_delete(self, props: Props, obs: Observed) -> list[Step]:
        if props.get("preexisting"):
            return []
        return [Step(props["delete"], "delete")] if props.get("delete") else []


class CommandWithVerify(Resource, module="host", name="CommandWithVerify"):
    """Run `create` on a host until `verify` passes; `delete` on destroy.

    `create_stdin` (e.g. a password, as a Pulumi secret) goes to create's stdin, masked
    in every log and error, and is never copied into outputs."""

    verified: pulumi.Output[bool]

    def __init__(self, name: str, *, conn: dict, create: list[str], verify: list[str],
                 delete: Optional[list[str]] = None, triggers: Optional[dict] = None,
                 create_stdin: Optional[pulumi.Input[str]] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(
            CommandWithVerifyProvider(), name,
            {"conn": conn, "create": create, "verify": verify, "delete": delete,
             "create_stdin": create_stdin,
             "triggers": triggers or {}, "verified": None, "inputs_hash": None},
            opts,
        )
