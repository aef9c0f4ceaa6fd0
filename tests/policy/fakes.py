"""Validation arguments built with the policy SDK's own classes, as the engine would send them.

Properties go through the SDK's unknown-checking proxy (reading an unknown raises, as in a
preview); secret values are `pulumi_policy.Secret` leaves, as the pack's engine patch makes
them (tests/policy/test_validators.py checks that patch on wire-format properties).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from pulumi_policy import (
    PolicyCustomTimeouts, PolicyResource, PolicyResourceOptions, ResourceValidationArgs,
    Secret, StackValidationArgs,
)
from pulumi_policy.proxy import (
    UNKNOWN_BOOLEAN_VALUE, UNKNOWN_NUMBER_VALUE, UNKNOWN_OBJECT_VALUE, UNKNOWN_STRING_VALUE,
    unknown_checking_proxy,
)

FILE = "pulumi-python:dynamic/host:File"
PACKAGE_SET = "pulumi-python:dynamic/host:PackageSet"
SYSTEMD_UNIT = "pulumi-python:dynamic/host:SystemdUnit"
ACCOUNT = "pulumi-python:dynamic/host:Account"
HOST = "gpu-fleet:inventory:Host"
K3S_AUDIT = "pulumi-python:dynamic/k3s:Audit"
K3S_PRESERVE = "pulumi-python:dynamic/k3s:Preserve"
K3S_SEAL = "pulumi-python:dynamic/k3s:Seal"
K3S_STOP = "pulumi-python:dynamic/k3s:Stop"

UNKNOWN_STR = UNKNOWN_STRING_VALUE
UNKNOWN_NUM = UNKNOWN_NUMBER_VALUE
UNKNOWN_BOOL = UNKNOWN_BOOLEAN_VALUE
UNKNOWN_OBJ = UNKNOWN_OBJECT_VALUE

CONN = {"name": "gpu01", "address": "192.0.2.21"}


def _opts() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], None)


def _urn(rtype: str, name: str) -> str:
    return f"urn:pulumi:test::gpu-fleet::{rtype}::{name}"


def resource_args(rtype: str, props: dict, name: str = "res") -> ResourceValidationArgs:
    return ResourceValidationArgs(rtype, unknown_checking_proxy(props), _urn(rtype, name), name,
                                  _opts(), None)


def policy_resource(rtype: str, props: dict, name: str, depends_on=()) -> PolicyResource:
    """A stack resource; `depends_on`: the PolicyResources it depends on (the engine's list)."""
    return PolicyResource(rtype, unknown_checking_proxy(props), _urn(rtype, name), name, _opts(),
                          None, None, list(depends_on), {})


def k3s_retirement(nodes: list[str], server: Optional[str], batch_size: int = 4, change_id: str = "k3s-retire-1",
                   sealed: Any = UNKNOWN_BOOLEAN_VALUE, seal_out: Any = None,
                   stop_props: Optional[dict[str, dict]] = None) -> dict[str, PolicyResource]:
    """The K3s retirement layer's resources as the engine lists them (name -> resource): one
    audit, a preserve per node (the agents' wait on the server's), one seal over every preserve,
    agent stops in batches of `batch_size` (each waits on the seal and the previous batch), the
    server's stop after every agent. `sealed`: every stop's `sealed` input (unknown, as in a
    first preview); `seal_out`: the seal's `sealed` output (absent before it ran);
    `stop_props`: per node, inputs that replace a stop's defaults. Tests edit `.dependencies`."""
    conn = lambda n: {"name": n, "address": "192.0.2.30"}  # noqa: E731
    out: dict[str, PolicyResource] = {}
    audit = out["k3s-audit"] = policy_resource(K3S_AUDIT, {"conn": conn(server or nodes[0]),
                                                           "change_id": change_id}, "k3s-audit")
    first = [server] if server in nodes else []
    pres = {}
    for n in first + [n for n in nodes if n != server]:
        role = "server" if n == server else "agent"
        deps = [audit] + ([pres[server]] if first and n != server else [])
        pres[n] = out[f"{n}-k3s-preserve"] = policy_resource(
            K3S_PRESERVE, {"conn": conn(n), "role": role, "change_id": change_id, "audit": UNKNOWN_OBJECT_VALUE},
            f"{n}-k3s-preserve", deps)
    seal_props = {"conn": conn("storage"), "change_id": change_id, "nodes": UNKNOWN_OBJECT_VALUE}
    if seal_out is not None:
        seal_props["sealed"] = seal_out
    seal = out["k3s-seal"] = policy_resource(K3S_SEAL, seal_props, "k3s-seal", pres.values())

    def stop(n: str, role: str, deps: list) -> PolicyResource:
        props = {"conn": conn(n), "role": role, "change_id": change_id, "sealed": sealed,
                 "proofs": UNKNOWN_OBJECT_VALUE, "audit": UNKNOWN_OBJECT_VALUE,
                 **(stop_props or {}).get(n, {})}
        out[f"{n}-k3s-stop"] = policy_resource(K3S_STOP, props, f"{n}-k3s-stop", [seal, audit, pres[n], *deps])
        return out[f"{n}-k3s-stop"]

    agents = [n for n in nodes if n != server]
    previous: list = []
    agent_stops: list = []
    for i in range(0, len(agents), batch_size):
        previous = [stop(a, "agent", previous) for a in agents[i:i + batch_size]]
        agent_stops += previous
    if first:
        stop(server, "server", agent_stops)
    return out


def stack_args(*resources: PolicyResource) -> StackValidationArgs:
    return StackValidationArgs(list(resources))


def file_args(path: str, content: Any, name: str = "file", **extra) -> ResourceValidationArgs:
    props = {"conn": CONN, "path": path, "content": content, "mode": "0644", "owner": "root",
             "group": "root", "validate": None, "secret": False}
    props.update(extra)
    return resource_args(FILE, props, name)


def violations(validator: Callable, args) -> list[str]:
    """Every message the validator reports (and the URN it names, if any, is ignored)."""
    out: list[str] = []

    def report(message: str, urn: Optional[str] = None) -> None:
        assert isinstance(message, str) and message
        out.append(message)

    validator(args, report)
    return out


__all__ = ["Secret", "resource_args", "policy_resource", "stack_args", "file_args", "violations",
           "k3s_retirement"]
