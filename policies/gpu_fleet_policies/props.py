"""Reading resource properties the way the engine hands them over, without crashing.

A policy sees a resource's properties through the SDK's unknown-checking proxy: reading a
value that is unknown during preview raises `UnknownValueError`. `snapshot` turns that into
a plain dict once, where

- an unknown value is the `UNKNOWN` singleton (policies skip what they cannot know yet; the
  same policy runs again on real values before `pulumi up` touches a host),
- a Pulumi secret is a `pulumi_policy.Secret` leaf (see engine.py), so a policy can ask
  whether a value was a secret and still read it with `reveal`,
- everything else is plain Python (dicts, lists, str, float, bool, None).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any, Optional

from pulumi_policy import Secret
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE, UNKNOWN_ARRAY_VALUE, UNKNOWN_ASSET_VALUE, UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE, UNKNOWN_OBJECT_VALUE, UNKNOWN_STRING_VALUE,
)

# Type tokens of the project's own resources.
FILE = "pulumi-python:dynamic/host:File"
PACKAGE_SET = "pulumi-python:dynamic/host:PackageSet"
SYSTEMD_UNIT = "pulumi-python:dynamic/host:SystemdUnit"
ACCOUNT = "pulumi-python:dynamic/host:Account"
#: bundles (components/providers/bundle.py): several Accounts or Files of one host as one resource
ACCOUNTS = "pulumi-python:dynamic/host:Accounts"
FILES = "pulumi-python:dynamic/host:Files"
COMMAND = "pulumi-python:dynamic/host:CommandWithVerify"
HOST = "gpu-fleet:inventory:Host"
INVENTORY = "gpu-fleet:inventory:Inventory"
FLEET = "gpu-fleet:index:Fleet"
# The K3s retirement layer's steps (components/layers/k3s_retirement/retire.py).
K3S_AUDIT = "pulumi-python:dynamic/k3s:Audit"
K3S_PRESERVE = "pulumi-python:dynamic/k3s:Preserve"
K3S_SEAL = "pulumi-python:dynamic/k3s:Seal"
K3S_STOP = "pulumi-python:dynamic/k3s:Stop"

_SENTINELS = frozenset({
    UNKNOWN_BOOLEAN_VALUE, UNKNOWN_NUMBER_VALUE, UNKNOWN_STRING_VALUE, UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE, UNKNOWN_ARCHIVE_VALUE, UNKNOWN_OBJECT_VALUE,
})


class _Unknown:
    """A value the engine does not know yet (preview)."""

    _inst: Optional["_Unknown"] = None

    def __new__(cls):
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:
        return False


UNKNOWN = _Unknown()


def _target(v: Any) -> Any:
    """The raw container behind an SDK proxy (the SDK's own serializer reads it the same way)."""
    try:
        return v["__target"]
    except Exception:  # not a proxy
        return None


def plain(v: Any) -> Any:
    """A proxied value as plain Python; unknowns become UNKNOWN, secrets stay Secret."""
    if isinstance(v, Secret):
        return Secret(plain(v.value))
    if isinstance(v, str):
        return UNKNOWN if v in _SENTINELS else v
    if isinstance(v, (bool, int, float)) or v is None or v is UNKNOWN:
        return v
    if isinstance(v, (dict, list, tuple)):
        raw = v
    else:
        raw = _target(v)
    if isinstance(raw, dict):
        return {k: plain(x) for k, x in raw.items()}
    if isinstance(raw, (list, tuple)):
        return [plain(x) for x in raw]
    if isinstance(v, Mapping):
        return {k: plain(_safe_get(v, k)) for k in list(v)}
    if hasattr(v, "__len__") and hasattr(v, "__getitem__"):
        return [plain(_safe_get(v, i)) for i in range(len(v))]
    return v


def _safe_get(container: Any, key: Any) -> Any:
    from pulumi_policy.proxy import UnknownValueError

    try:
        return container[key]
    except UnknownValueError:
        return UNKNOWN


def snapshot(props: Any) -> dict:
    """Resource properties as a plain dict (empty when there are none)."""
    if props is None:
        return {}
    out = plain(props)
    return out if isinstance(out, dict) else {}


def is_unknown(v: Any) -> bool:
    """Unknown, or a secret whose value is unknown."""
    if isinstance(v, Secret):
        return is_unknown(v.value)
    return v is UNKNOWN


def contains_unknown(v: Any) -> bool:
    if is_unknown(v):
        return True
    if isinstance(v, Secret):
        return contains_unknown(v.value)
    if isinstance(v, dict):
        return any(contains_unknown(x) for x in v.values())
    if isinstance(v, list):
        return any(contains_unknown(x) for x in v)
    return False


def is_secret(v: Any) -> bool:
    return isinstance(v, Secret)


def reveal(v: Any) -> Any:
    """The value behind any secret markers, at any depth."""
    if isinstance(v, Secret):
        return reveal(v.value)
    if isinstance(v, dict):
        return {k: reveal(x) for k, x in v.items()}
    if isinstance(v, list):
        return [reveal(x) for x in v]
    return v


def text(v: Any) -> Optional[str]:
    """A string value, revealed; None when missing, unknown or not a string."""
    v = reveal(v)
    return v if isinstance(v, str) else None


def as_int(v: Any) -> Optional[int]:
    """An integer value (the engine sends numbers as floats); None otherwise."""
    v = reveal(v)
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def host_of(props: dict) -> Optional[str]:
    """The host a primitive acts on, from its `conn` input."""
    conn = reveal(props.get("conn"))
    if isinstance(conn, dict):
        name = conn.get("name")
        if isinstance(name, str) and name:
            return name
        addr = conn.get("address")
        if isinstance(addr, str) and addr:
            return addr
    return None


def path_of(props: dict) -> Optional[str]:
    p = text(props.get("path"))
    return posixpath.normpath(p) if p else None


def describe(kind: str, name: str, props: dict, what: Optional[str] = None) -> str:
    """`File "munge-key" (/etc/munge/munge.key on gpu01)`: how messages name a resource."""
    host = host_of(props)
    detail = what or ""
    if host:
        detail = f"{detail} on {host}" if detail else f"on {host}"
    return f'{kind} "{name}"' + (f" ({detail})" if detail else "")
