"""What resource validators share: pick the resource, snapshot its inputs, name it."""

from __future__ import annotations

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
        _STORED[(src, sha)] = data.decode(errors="replace") if ok else None
    return _STORED[(src, sha)]


Validator = Callable[[Any, Callable[[str, Optional[str]], None]], None]
