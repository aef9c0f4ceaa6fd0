"""What resource validators share: pick the resource, snapshot its inputs, name it."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import props as P


@dataclass
class Res:
    """One resource as a validator sees it."""

    type: str
    name: str
    urn: str
    props: dict

    def get(self, key: str, default: Any = None) -> Any:
        return self.props.get(key, default)

    def describe(self, kind: str, what: Optional[str] = None) -> str:
        return P.describe(kind, self.name, self.props, what)


def resource(args, *types: str) -> Optional[Res]:
    """The resource under validation if it has one of `types`; its inputs as a plain dict."""
    if getattr(args, "resource_type", None) not in types:
        return None
    return Res(args.resource_type, getattr(args, "name", "") or "", getattr(args, "urn", "") or "",
               P.snapshot(getattr(args, "props", None)))


def stack_resources(args, *types: str) -> list[Res]:
    """Resources of the stack with one of `types`, their outputs as plain dicts."""
    out = []
    for r in getattr(args, "resources", None) or []:
        if getattr(r, "resource_type", None) in types:
            out.append(Res(r.resource_type, getattr(r, "name", "") or "", getattr(r, "urn", "") or "",
                           P.snapshot(getattr(r, "props", None))))
    return out


def file_content(res: Res) -> Optional[str]:
    """A File's content as text; None when missing or unknown (nothing to check yet).

    A File by hash (`File(..., by_hash=True)`: a node's slurm.conf) carries the path of its
    bytes in the program's local store and their SHA-256 instead; the analyzer runs on the
    same machine in the same run, so it reads them there and checks the same text as inline
    content. Bytes that do not hash to what the File declares are not checked here: the
    provider refuses to write them."""
    c = res.get("content")
    if P.is_unknown(c):
        return None
    if c is None:
        src, sha = P.text(res.get("source")), P.text(res.get("source_sha256"))
        if src and sha:
            return _stored(src, sha)
    return P.text(c)


_STORED: dict[tuple[str, str], Optional[str]] = {}


def _stored(src: str, sha: str) -> Optional[str]:
    if (src, sha) not in _STORED:
        try:
            data = open(src, "rb").read()
        except OSError:
            data = None
        ok = data is not None and hashlib.sha256(data).hexdigest() == sha
        _STORED[(src, sha)] = data.decode(errors="replace") if data is not None and ok else None
    return _STORED[(src, sha)]


Validator = Callable[[Any, Callable[[str, Optional[str]], None]], None]


# ---- bundles: each member validated as the resource it would be on its own ---------------------
#: a bundle's type -> the type of its members (components/providers/bundle.py)
BUNDLES = {P.ACCOUNTS: P.ACCOUNT, P.FILES: P.FILE}


class _As:
    """`of` with some attributes replaced; every other one is `of`'s."""

    def __init__(self, of: Any, **given: Any):
        self._of = of
        self.__dict__.update(given)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._of, name)


def _members(r: Any) -> list[Any]:
    """A bundle's members as resources of the member type (name: bundle name and member path
    or user), or the resource itself; none while a preview has not computed them."""
    rtype = getattr(r, "resource_type", None)
    mtype = BUNDLES.get(rtype) if rtype is not None else None
    if mtype is None:
        return [r]
    props = P.snapshot(getattr(r, "props", None))
    members = props.get("members")
    if P.is_unknown(members) or not isinstance(members, list):
        return []  # checked again with real values, as any unknown
    out = []
    for m in members:
        if not isinstance(m, dict):
            continue
        what = m.get("path") or m.get("name")
        out.append(_As(r, resource_type=mtype, props={**m, "conn": props.get("conn")},
                       name=f"{getattr(r, 'name', '')} {P.text(what) if what else ''}".strip()))
    return out


def each_member(fn: "Validator", kind: str) -> "Validator":
    """`fn` as the pack runs it: a bundle's members are validated as separate resources of the
    member type would be (a resource policy once a member, a stack policy sees them in the
    stack's resources), so a bundle cannot carry past a policy what a File or Account could not."""
    if kind == "resource":
        @functools.wraps(fn)
        def resource_policy(args, report_violation):
            for m in _members(args):  # the resource itself unless it is a bundle
                fn(m, report_violation)
        return resource_policy

    @functools.wraps(fn)
    def stack_policy(args, report_violation):
        resources = [m for r in getattr(args, "resources", None) or [] for m in _members(r)]
        return fn(_As(args, resources=resources), report_violation)
    return stack_policy
