"""Moving the retirement's items: host to host with both sides' SHA-256 compared (`ship`),
or from this program into the bundle (`put`, `put_once`: written once, never overwritten),
and the bundle's layout for a change. Preserve and rollback both move items this way."""

from __future__ import annotations

import re
import time

from ...errors import FleetError
from ...kit import bash
from ...providers.parts import Props
from ...scripts import script
from ...transport import Connection
from .bundle import Layout

_SEND = script(__file__, "send.sh")
_RECEIVE = script(__file__, "receive.sh")
_ONCE = script(__file__, "put_once.sh")
_SHA = re.compile(r"gpu-fleet-sha256 ([0-9a-f]{64})")


def layout(props: Props) -> Layout:
    return Layout(props["bundle_dir"], props["change_id"])


def ship(src: Connection, what: list[str], dst: Connection, dest: str) -> dict:
    """Stream one item from `src` (send.sh <kind> <args>) into `dest` on `dst`; both sides'
    SHA-256 must agree."""
    s, d = src.pipe(bash(_SEND, *what), dst, bash(_RECEIVE, dest))
    sent = _SHA.search(s.stderr)
    got = d.stdout.split()
    if not sent or len(got) != 2 or sent.group(1) != got[0]:
        raise FleetError(f"host {dst.t.name}: {dest}: the SHA-256 of what {src.t.name} sent "
                         f"({sent.group(1) if sent else 'none'}) is not what landed ({got[0] if got else 'none'})")
    return {"sha256": got[0], "size": int(got[1])}


def tar_existing(node: Connection, paths: list[str], storage: Connection, lay: Layout, rel: str) -> dict:
    """One tar item `rel` of those of `paths` that exist on `node` (none: no item)."""
    have = node.run(["sh", "-c", 'for p; do [ -e "$p" ] && echo "$p"; done; true', "sh", *paths],
                    mutating=False).stdout.split() if paths else []
    if not have:
        return {"items": {}, "paths": []}
    dest = lay.item(node.t.name, rel)
    return {"items": {rel: ship(node, ["tar", *[x.lstrip("/") for x in have]], storage, dest)}, "paths": have}


def put(storage: Connection, path: str, data: bytes) -> dict:
    out = storage.run(bash(_RECEIVE, path), stdin=data, mutating=True).stdout.split()
    return {"sha256": out[0], "size": int(out[1])}


def put_once(storage: Connection, path: str, data: bytes) -> str:
    return storage.run(bash(_ONCE, path), stdin=data, mutating=True).stdout.strip()


def kubectl(props: Props, *args: str) -> list[str]:
    p = props["paths"]
    return [p["kubectl"], "--kubeconfig", p["kubeconfig"], *args]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
