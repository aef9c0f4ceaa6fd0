"""CommandWithVerify: a create/delete command pair whose effect a verify command proves.

For what has no richer primitive yet. `verify` is the probe (read-only, exit 0
means the effect is there), so refresh notices when the effect is gone and the
next up re-runs `create`. `create` re-runs otherwise only when its inputs
(`create` itself or `triggers`) change: an update for another reason (the host
reached as another SSH user) only verifies. A create that leaves verify failing
fails the deployment with verify's exit code and output.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, Resource

from ..transport import HostError
from ..transport.command import Piece, display, mask, secrets_of
from .base import HostPrimitive
from .parts import NotConverged, Observed, Props, Step, _entry, run_steps


def inputs_hash(props: Props) -> str:
    blob = json.dumps({"create": props["create"], "triggers": props.get("triggers")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def verify_outcome(stdout: str) -> tuple[Optional[int], str]:
    """(verify's exit code, its output) from the probe's stdout."""
    lines = stdout.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("verify-rc "):
            return int(lines[i].split()[1]), "\n".join(lines[:i])
    return None, stdout


class VerifyFailed(HostError, NotConverged):
    """`create` ran, yet `verify` still fails: host, verify command, exit code and output."""


class CommandWithVerifyProvider(HostPrimitive):
    def key(self, props: Props) -> str:
        return "command:" + inputs_hash(props)[:12]

    def probe_argv(self, props: Props) -> list[Piece]:
        return ["sh", "-c", '"$@" 2>&1; echo "verify-rc $?"', "sh", *props["verify"]]

    def parse(self, props: Props, stdout: str) -> Observed:
        return {"verified": verify_outcome(stdout)[0] == 0}

    def desired(self, props: Props) -> dict[str, Any]:
        return {"verified": True, "inputs_hash": inputs_hash(props)}

    def state(self, props: Props, obs: Observed) -> dict[str, Any]:
        return {"verified": obs["verified"]}

    def plan(self, props: Props, obs: Observed, record: Props) -> list[Step]:
        if obs["verified"]:
            return []
        stdin = props.get("create_stdin")
        return [Step(props["create"], "create", stdin=stdin.encode() if stdin else None,
                     stdin_secret=bool(stdin))]

    record_keys = ("preexisting", "inputs_hash")

    def kept_key(self, props: Props) -> str:
        """The record of an effect is keyed by what proves it (create may change on update)."""
        return "verify:" + json.dumps(props["verify"])

    @_entry
    def create(self, props: Props):
        """An effect already in place before create (adopted) is not undone by destroy; one a
        killed run made is (its record kept on the host says it was not there: kept.py)."""
        obs, found, _ = self.probe_kept(self._conn(props), props)
        pre = (found or {}).get("preexisting")
        props = {**props, "preexisting": pre if isinstance(pre, bool) else obs["verified"]}
        # a killed run already ran this same create: run it again only if verify fails
        same = found is not None and found.get("inputs_hash") == inputs_hash(props)
        return CreateResult(id_=self.id_of(props), outs=self.converge(props, {"inputs_hash": inputs_hash(props)}
                                                                      if same else {}))

    def keeps_record(self) -> bool:
        return True  # `preexisting`, in its own create (not `remember`)

    def public_inputs(self, props: Props) -> Props:
        return {k: v for k, v in props.items() if k != "create_stdin"}

    def apply(self, props: Props, record: Props) -> Props:
        """Create runs on create and when its inputs changed, else only when verify fails."""
        conn = self._conn(props)
        if props.get("preexisting") is None and "preexisting" in record:
            props = {**props, "preexisting": record["preexisting"]}
        rerun = record.get("inputs_hash") != inputs_hash(props)
        steps = self.plan(props, {"verified": False} if rerun else self.probe(conn, props), {})
        if steps and "inputs_hash" not in record and props.get("delete") and not props.get("preexisting"):
            # a create that makes the effect: the host keeps that it was not there before
            steps = [self.keep_step(props, {"preexisting": False, "inputs_hash": inputs_hash(props)}), *steps]
        # verify rides in the create's round trip
        read = run_steps(conn, steps, then=self.probe_argv(props)) if steps else None
        rc, output = verify_outcome((read or conn.run(self.probe_argv(props), mutating=False)).stdout)
        if rc != 0:
            stdin = props.get("create_stdin")
            raise VerifyFailed(conn.t.name, display(props["verify"]), rc,
                               mask(output, secrets_of(props["create"], [stdin] if stdin else [])),
                               f"the effect of `{display(props['create'])}` is not there")
        return {**self.outputs(props, {}, {"verified": True}), "inputs_hash": inputs_hash(props)}

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
