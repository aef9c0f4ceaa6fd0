"""ZfsDatasets: the layer's datasets on the storage host, with their duties, read back.

The pool is the admin's: it is checked (imported, healthy), never created or destroyed.
Each dataset is created when missing with its `mountpoint`, `canmount=on` and
`sharenfs=off` (ZFS must never manage an export this layer manages too), and its
properties are set when they drift; the models dataset is `readonly=on`, read back from
the mount as well as the property (zfs-fuse keeps a rw mount while saying `off temporary`),
unless a layer publishes into it on the storage host (the model snapshot layer: the nodes
still see it read-only, through the export).
Each store holds a marker with the dataset's name and GUID, so a client proves it sees
this dataset and not a directory of the same name.

"Mounted" is what ZFS and the kernel say together: `zfs get mounted` is yes AND `findmnt
-T <mountpoint>` shows the dataset as the source at that path. A dataset that exists but
is not mounted (the pool not imported, someone's `zfs unmount`) is refused with what
findmnt saw, never mounted over: the layer does not export, mount or admit anything
until the admin has it back. Delete keeps every dataset and its data.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from ...providers.base import HostPrimitive
from ...providers.parts import Observed, PlanRefused, Props, Step
from ...facts import shell
from ...facts.mounts import parse_findmnt
from ...facts.zfs import parse_zfs_get, parse_zpool_list
from ...scripts import script, sections
from ...kit import sh
from .parse import pool_problem
from .stores import Store

_PROBE = shell("mounts", "zfs") + script(__file__, "datasets_probe.sh")
_MARKER = shell("mounts") + script(__file__, "marker.sh")
_READONLY = shell("mounts") + script(__file__, "readonly.sh")
_WRITABLE = shell("mounts") + script(__file__, "writable.sh")

MARKER = ".gpu-fleet-store"
#: mode of the data store's directories: every job user writes there, only owners remove
DIR_MODE = "1777"


def marker_text(dataset: str, guid: Optional[str]) -> str:
    return f"gpu-fleet store dataset={dataset} guid={guid}"


def parse_datasets(props: Props, stdout: str) -> Observed:
    """The probe's sections -> pool health, each dataset's properties, mount, marker; dir modes."""
    sec = sections(stdout)
    pools = parse_zpool_list(sec.get("pool", ""))
    zfs = parse_zfs_get(sec.get("props", ""))
    stores = {}
    for s in _stores(props):
        ds = s.dataset
        mounts = parse_findmnt(sec.get(f"mount {ds}", ""))
        m = mounts[0] if mounts else None
        got = zfs.get(ds, {})
        stores[ds] = {
            "exists": ds in zfs,
            "props": {k: v[0] for k, v in got.items()},
            "readonly_source": got.get("readonly", ("", ""))[1],
            "mount": None if m is None else {"target": m.target, "source": m.source, "fstype": m.fstype,
                                             "options": list(m.options), "id": m.mount_id},
            "marker": sec.get(f"marker {ds}", "").strip(),
        }
    dirs = {d: sec.get(f"dir {d}", "").strip() for d in props["data_dirs"]}
    return {"health": pools.get(props["pool"]), "status": sec.get("status", "").strip(),
            "pool_error": sec.get("pool", "").strip(), "stores": stores, "dirs": dirs}


def _stores(props: Props) -> list[Store]:
    return [Store.from_dataset_input(s) for s in props["datasets"]]


def mount_problem(store: Store, seen: dict) -> Optional[str]:
    """Why a store does not count as mounted (None when it does), naming what findmnt saw."""
    ds, mp = store.dataset, store.mountpoint
    m = seen["mount"]
    mounted = seen["props"].get("mounted")
    shown = (f"findmnt -T {mp} shows {m['target']} ({m['source']}, {m['fstype']})" if m
             else f"findmnt -T {mp} shows nothing")
    if mounted != "yes":
        return (f"dataset {ds} is not mounted (zfs get mounted: {mounted or 'nothing'}); {shown}"
                + (": the directory is on another filesystem, not the dataset" if m else ""))
    if m is None or m["target"] != mp or m["source"] != ds:
        return f"{mp} is not the mountpoint of {ds}: {shown}"
    return None


class ZfsDatasetsProvider(HostPrimitive):
    def key(self, props: Props) -> str:
        return "zfs:" + ",".join(s.dataset for s in _stores(props))

    def probe_argv(self, props: Props) -> list[str]:
        pairs = [x for s in _stores(props) for x in (s.dataset, s.mountpoint)]
        data = next(s.mountpoint for s in _stores(props) if s.duty == "data")
        return sh(_PROBE, props["pool"], data, *pairs, "--dirs", *props["data_dirs"])

    def parse(self, props: Props, stdout: str) -> Observed:
        return parse_datasets(props, stdout)

    def desired(self, props: Props) -> dict[str, Any]:
        return {"stores_ok": {s.dataset: True for s in _stores(props)},
                "dirs": {d: DIR_MODE for d in props["data_dirs"]}}

    def state(self, props: Props, obs: Observed) -> dict[str, Any]:
        ok = {}
        for s in _stores(props):
            seen = obs["stores"][s.dataset]
            ok[s.dataset] = bool(seen["exists"] and not self._drift(s, seen)
                                 and mount_problem(s, seen) is None
                                 and seen["marker"] == marker_text(s.dataset, seen["props"].get("guid")))
        return {"stores_ok": ok, "dirs": obs["dirs"], "health": obs["health"],
                "guids": {ds: seen["props"].get("guid") for ds, seen in obs["stores"].items()},
                "mounts": {ds: (seen["mount"] or {}).get("id") for ds, seen in obs["stores"].items()}}

    def _drift(self, store: Store, seen: dict) -> dict[str, str]:
        """Properties to set; a read-only store also counts as drifted while its mount is rw."""
        want = store.properties()
        drift = {k: v for k, v in want.items() if seen["props"].get(k) != v}
        m = seen["mount"]
        if store.readonly and m and "ro" not in m["options"]:
            drift["readonly"] = "on"
        if not store.readonly and m and "ro" in m["options"]:
            drift["readonly"] = "off"
        return drift

    def plan(self, props: Props, obs: Observed, record: Props) -> list[Step]:
        pool, host = props["pool"], props["conn"]["name"]
        fatal, _warning = pool_problem(pool, obs["health"], obs["status"] or obs["pool_error"])
        if fatal:
            raise PlanRefused(f"host {host}: storage: {fatal}")
        steps: list[Step] = []
        for s in _stores(props):
            ds, mp, seen = s.dataset, s.mountpoint, obs["stores"][s.dataset]
            if not seen["exists"]:
                opts = [x for k, v in s.properties().items() if k != "readonly" for x in ("-o", f"{k}={v}")]
                steps.append(Step(["zfs", "create", *opts, ds], f"create {ds} ({s.duty})"))
                steps.append(Step(sh(_MARKER, ds, mp), f"mark {ds} with its GUID"))
                if s.readonly:
                    steps.append(Step(sh(_READONLY, ds, mp), f"make {ds} read-only"))
                continue
            problem = mount_problem(s, seen)
            if problem:
                raise PlanRefused(
                    f"host {host}: storage: {problem}. Refusing to export it, mount it on the nodes or "
                    f"admit them: import the pool or `zfs mount {ds}`, then run `pulumi up` again")
            drift = self._drift(s, seen)
            for k, v in drift.items():
                if k != "readonly":
                    steps.append(Step(["zfs", "set", f"{k}={v}", ds], f"{ds}: {k} is {seen['props'].get(k)}"))
            if seen["marker"] != marker_text(ds, seen["props"].get("guid")):
                steps.append(Step(sh(_MARKER, ds, mp), f"mark {ds} with its GUID"))
            if drift.get("readonly") == "on":
                steps.append(Step(sh(_READONLY, ds, mp), f"make {ds} read-only (the mount is writable)"))
            elif drift.get("readonly") == "off":
                steps.append(Step(sh(_WRITABLE, ds, mp), f"make {ds} writable on the storage host "
                                                         "(a layer publishes into it)"))
        data = next(s.mountpoint for s in _stores(props) if s.duty == "data")
        for d, mode in obs["dirs"].items():
            if mode != DIR_MODE:
                steps.append(Step(["install", "-d", "-m", DIR_MODE, f"{data}/{d}"],
                                  f"{data}/{d}: mode {mode or 'missing'}"))
        return steps

    def plan_delete(self, props: Props, obs: Observed) -> list[Step]:
        return []  # datasets and their data are never destroyed by a rollback


class ZfsDatasets(Resource, module="storage", name="ZfsDatasets"):
    """The models and data datasets on the storage host, created or adopted, never destroyed."""

    guids: pulumi.Output[dict]
    #: each store's mount as findmnt numbers it: a store mounted again (the pool re-imported)
    #: is a new mount, which refresh records and dependents see
    mounts: pulumi.Output[dict]
    stores_ok: pulumi.Output[dict]
    health: pulumi.Output[str]

    def __init__(self, name: str, *, conn: dict, pool: str, stores: list[Store], data_dirs: list[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        """`stores`: models first; their properties are what the layer sets."""
        super().__init__(ZfsDatasetsProvider(), name,
                         {"conn": conn, "pool": pool, "datasets": [s.dataset_input() for s in stores],
                          "data_dirs": data_dirs,
                          "guids": None, "mounts": None, "stores_ok": None, "health": None, "dirs": None},
                         opts)
