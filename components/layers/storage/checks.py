"""What the storage layer proves on every rollout, from both sides.

- `ExportCheck`, on the storage host: each store still mounted as its dataset, and the
  server exporting exactly that path to the stack's client network: ganesha's own view
  over DBus (`DisplayExport`), or the kernel's (`exportfs -v`, `/proc/fs/nfsd/exports`).
  Any difference fails the rollout before a node is told to mount.
- `ClientCheck`, on every Slurm node at once (one round trip each): each mount as the
  kernel shows it (`findmnt -M`: source, type, options), each store's marker matching its
  dataset's GUID (the node sees the dataset, not an empty directory), a write into the
  models mount that must fail as read-only, and one into the data job root that must
  succeed, land as the squashed root and be cleaned up. A node that fails is refused
  admission with the reason (the layer's `Gate`); only a way to the host that fails
  (SSH) fails the rollout.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from .config import StorageLayer
from ...errors import FleetError
from ...providers.base import RolloutCheck
from ...providers.parts import Props, target_of
from ...facts import shell
from ...facts.mounts import parse_findmnt
from ...scripts import script, sections
from ...transport import FanOutError, SshTarget, connection, fan_out
from ...kit import sh
from .datasets import MARKER, marker_text
from .stores import Store
from .parse import (
    judge_exports, judge_ganesha_export, judge_mounts, parse_exportfs_v, parse_ganesha_export,
    parse_proc_nfsd_exports,
)

_EXPORTS = shell("mounts") + script(__file__, "exports_probe.sh")
_CLIENT = shell("mounts") + script(__file__, "client_probe.sh")

#: the uid an NFS server gives root's writes under root_squash
SQUASHED_UID = "65534"


def judge_server(props: Props, stdout: str) -> tuple[dict, list[str]]:
    """Pure: the storage host's probe -> (facts, failures), judged by parse.py's judges."""
    sec = sections(stdout)
    st = StorageLayer.model_validate(props["layer"])
    stores = [Store.from_export_input(s) for s in props["stores"]]
    fails: list[str] = []
    facts: dict[str, Any] = {}
    for s in stores:
        mounts = parse_findmnt(sec.get(f"mount {s.dataset}", ""))
        fails += judge_mounts(st, s.duty, mounts[0] if mounts else None, "server")
    if props["server"] == "ganesha":
        for s in stores:
            e = parse_ganesha_export(sec.get(f"ganesha {s.export_id}", ""))
            if e is not None:
                facts[s.duty] = {"path": e.path, "pseudo": e.pseudo, "clients": list(e.clients)}
            fails += judge_ganesha_export(st, s.duty, e)
    else:
        exported = parse_exportfs_v(sec.get("exportfs", ""))
        facts = {"exportfs": {p: {c: sorted(o) for c, o in cl.items()} for p, cl in exported.items()},
                 "nfsd": {p: sorted(cl) for p, cl in parse_proc_nfsd_exports(sec.get("nfsd", "")).items()}}
        fails += judge_exports(st, exported)
    return facts, fails


class ExportCheckProvider(RolloutCheck):
    def key(self, props: Props) -> str:
        return "storage-exports"

    def run(self, props: Props) -> dict[str, Any]:
        conn = connection(target_of(props))
        conn.connect()
        triples = [x for s in map(Store.from_export_input, props["stores"])
                   for x in (s.dataset, s.mountpoint, str(s.export_id))]
        res = conn.run(sh(_EXPORTS, props["server"], *triples), mutating=False, check=False)
        facts, fails = judge_server(props, res.stdout)
        if fails:
            raise FleetError(f"host {conn.t.name}: storage exports failed verification; no node is told "
                             "to mount:\n  - " + "\n  - ".join(fails) + "\n  probe output:\n    "
                             + (res.stdout + res.stderr).strip().replace("\n", "\n    "))
        return {"exported": facts}


class ExportCheck(Resource, module="storage", name="ExportCheck"):
    exported: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, layer: StorageLayer, stores: list[Store],
                 triggers: pulumi.Input[dict], opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(ExportCheckProvider(), name,
                         {"conn": conn, "server": layer.server, "clients": str(layer.clients),
                          "stores": [s.export_input() for s in stores],
                          "layer": layer.model_dump(mode="json"), "triggers": triggers, "exported": None}, opts)


def judge_client(props: Props, stdout: str, guids: dict) -> list[str]:
    """Pure: one node's probe -> every failed check, as a sentence."""
    sec = sections(stdout)
    fails = []
    for s in map(Store.from_client_input, props["stores"]):
        mp = s.client_mount
        mounts = parse_findmnt(sec.get(f"mount {mp}", ""))
        if not mounts:
            fails.append(f"{mp} is not mounted (findmnt -M shows nothing)")
            continue
        m = mounts[0]
        if m.source != s.source or m.fstype not in props["fstypes"]:
            fails.append(f"{mp} is {m.source} ({m.fstype}), expected {s.source} ({' or '.join(props['fstypes'])})")
        mode = "ro" if s.duty == "models" else "rw"
        if mode not in m.options:
            fails.append(f"{mp} is mounted {','.join(m.options)}, expected {mode}")
        want = marker_text(s.dataset, guids.get(s.dataset))
        got = sec.get(f"marker {mp}", "").strip()
        if got != want:
            fails.append(f"{mp}/{MARKER} reads {got[:120]!r}, expected {want!r}: the mount is not {s.dataset}")
    models = sec.get("models-write", "").strip()
    if not models.startswith("refused") or "Read-only file system" not in models:
        fails.append(f"a write into the models mount was {models[:200] or 'not tried'} "
                     "(expected: refused, Read-only file system)")
    data = sec.get("data-write", "").strip().splitlines()
    if not data or not data[0].startswith("written"):
        fails.append(f"a write into the data job root was {' '.join(data)[:200] or 'not tried'}")
    else:
        if data[0] != f"written uid={SQUASHED_UID}":
            fails.append(f"root's write into the data store landed as {data[0].split()[-1]}, expected "
                         f"uid={SQUASHED_UID} (root_squash)")
        if data[-1] != "cleaned":
            fails.append("the data write probe was not cleaned up")
    return fails


class ClientCheckProvider(RolloutCheck):
    def key(self, props: Props) -> str:
        return "storage-clients"

    def run(self, props: Props) -> dict[str, Any]:
        mount = {s.duty: s.client_mount for s in map(Store.from_client_input, props["stores"])}
        models, data = mount["models"], mount["data"]
        argv = sh(_CLIENT, models, data, props["job_dir"])

        def probe(c):
            c.connect()
            return c.run(argv, mutating=False, check=False, timeout=120).stdout

        try:
            out = fan_out([SshTarget.from_dict(n) for n in props["nodes"]], probe,
                          max_parallel=int(props["max_parallel"]))
        except FanOutError as e:
            raise FleetError(f"storage clients: not every node could be probed over SSH:\n{e}") from None
        reasons = {n: judge_client(props, text, props["guids"]) for n, text in out.items()}
        passed = [n["name"] for n in props["nodes"] if not reasons.get(n["name"])]
        return {"passed": passed, "reasons": {n: r for n, r in reasons.items() if r}}


class ClientCheck(Resource, module="storage", name="ClientCheck"):
    passed: pulumi.Output[list]
    reasons: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, nodes: list[dict], stores: list[Store], fstypes: list[str],
                 job_dir: str, guids: pulumi.Input[dict], max_parallel: int, triggers: dict,
                 opts: Optional[pulumi.ResourceOptions] = None):
        """`conn`: the storage host's (names the check); `nodes`: every Slurm node's conn."""
        super().__init__(ClientCheckProvider(), name,
                         {"conn": conn, "nodes": nodes, "stores": [s.client_input() for s in stores],
                          "fstypes": fstypes,
                          "job_dir": job_dir, "guids": guids, "max_parallel": max_parallel,
                          "triggers": {**triggers, "guids": guids}, "passed": None, "reasons": None},
                         opts)
