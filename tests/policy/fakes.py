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


def policy_resource(rtype: str, props: dict, name: str) -> PolicyResource:
    return PolicyResource(rtype, unknown_checking_proxy(props), _urn(rtype, name), name, _opts(),
                          None, None, [], {})


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


__all__ = ["Secret", "resource_args", "policy_resource", "stack_args", "file_args", "violations"]
