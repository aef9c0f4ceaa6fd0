"""The K3s retirement's dynamic providers: audit, preserve, seal, stop (whose delete restores).

- `K3sAudit`: every retired node probed at once before anything changes; a node whose
  scheduling resources differ from its spec stops the retirement (nothing changed anywhere).
- `K3sPreserve`, per node: the bundle's steps in order, each ending in a marker on the storage
  host; a step whose marker exists is never run again, and the baseline is written once
  (`put_once.sh`), so an interrupted `up` resumes the same change doing only what is missing.
  The output says which steps were found done and which ran; it never guesses why a run
  stopped. Items travel host to host (`Connection.pipe`): a datastore, a token, a tar or a
  dump never passes through this program or its state, only their SHA-256.
- `K3sSeal`: every node's items re-hashed on the storage host against what the steps
  recorded, then per node a manifest and a SEAL, both immutable. No stop depends on less.
- `K3sStop`, per node, in batches, the server last: condition + marker, disable --now, what
  K3s leaves behind killed and unmounted, then verified (no K3s process, no GPU holder, no
  mount). Its delete is the rollback: the condition removed, the datastore and token checked
  against the bundle (restored from it only when missing or damaged), units back as the
  baseline had them, the server first; then every exported object present (created again
  from the bundle where missing), PostgreSQL proven with the proof's tables and rows, and the
  node Ready with a fresh heartbeat.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from ...errors import FleetError
from ...providers.base import RolloutCheck
from ...providers.parts import PlanRefused, Props, _entry, conn_change
from ...providers.undoable import ActionWithUndo
from ...scripts import script
from ...kit import bash, connect
from ...transport import Connection, FanOutError, SshTarget, fan_out
from .bundle import (
    MARKER, MOUNT_ROOTS, count_problems, export_objects, host_paths_of, judge_audit, object_name, parse_audit,
    parse_steps, parse_stopped, steps_for, stopped_problems,
)
from .rollback import PG_COUNTS, restore
from .transfer import kubectl, layout, now, put, put_once, ship, tar_existing

_AUDIT = script(__file__, "audit.sh")
_STATE = script(__file__, "bundle_state.sh")
_ITEMS = script(__file__, "verify_items.sh")
_BACKUP = script(__file__, "datastore_backup.sh")
_PROOF = script(__file__, "pg_proof.sh")
_STOP = script(__file__, "stop.sh")
_STOPPED = script(__file__, "stopped_probe.sh")
_HOLDERS = script(__file__, "gpu_holders.sh")


# --- audit -----------------------------------------------------------------------------------

class K3sAuditProvider(RolloutCheck):
    def key(self, props: Props) -> str:
        return f"k3s-audit:{props['change_id']}"

    def run(self, props: Props) -> dict[str, Any]:
        argv = bash(_AUDIT, props["gpu_prefix"], _HOLDERS, *props["units"])
        targets = {n["conn"]["name"]: n for n in props["nodes"]}

        def probe(c: Connection) -> str:
            c.connect()
            return c.run(argv, mutating=False, timeout=180).stdout

        try:
            out = fan_out([SshTarget.from_dict(n["conn"]) for n in targets.values()], probe,
                          max_parallel=int(props["max_parallel"]))
        except FanOutError as e:
            raise FleetError(f"K3s retirement {props['change_id']}: the audit could not reach every node; "
                             f"nothing was changed on any node:\n{e}") from None
        facts = {n: parse_audit(text) for n, text in sorted(out.items())}
        problems = [p for n, f in facts.items() for p in judge_audit(n, targets[n]["spec"], f)]
        if problems:
            raise FleetError(
                f"K3s retirement {props['change_id']}: the audit found nodes whose scheduling resources differ "
                "from the stack's node spec; nothing was changed on any node (fix the spec or the node):\n  - "
                + "\n  - ".join(problems))
        return {"audit": facts}


class K3sAudit(Resource, module="k3s", name="Audit"):
    audit: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, change_id: str, nodes: list[dict], gpu_prefix: str,
                 units: list[str], max_parallel: int, opts: Optional[pulumi.ResourceOptions] = None):
        """`conn`: the server's (names the check); `nodes`: [{conn, spec}] of every retired node."""
        super().__init__(K3sAuditProvider(), name,
                         {"conn": conn, "change_id": change_id, "nodes": nodes, "gpu_prefix": gpu_prefix,
                          "units": units, "max_parallel": max_parallel,
                          "triggers": {"nodes": nodes, "change_id": change_id}, "audit": None}, opts)


# --- preserve ---------------------------------------------------------------------------------

class K3sPreserveProvider(ResourceProvider):
    """One node's part of the bundle, step by step, resumable (see the module docstring)."""

    def _step(self, step: str, props: Props, node: Connection, storage: Connection,
              done: dict[str, dict]) -> dict:
        lay, n, p = layout(props), node.t.name, props["paths"]
        if step == "baseline":
            body = {"change_id": props["change_id"], "node": n, "at": now(), "role": props["role"],
                    "audit": props["audit"]}
            how = put_once(storage, lay.baseline(n), json.dumps(body, indent=1, sort_keys=True).encode())
            return {"items": {}, "baseline": how}
        if step == "datastore":
            tmp = f"{p['datastore']}.gpu-fleet-backup-{props['change_id']}"
            res = node.run(bash(_BACKUP, p["datastore"], tmp), mutating=True, timeout=1800)
            facts = dict(line.split(" ", 1) for line in res.stdout.strip().splitlines() if " " in line)
            if facts.get("integrity") != "ok":
                raise FleetError(f"host {n}: the online backup of {p['datastore']} fails its integrity check: "
                                 f"{facts.get('integrity')}; nothing is stopped")
            item = ship(node, ["file", tmp], storage, lay.item(n, "datastore/state.db"))
            node.run(["rm", "-f", "--", tmp], mutating=True)
            return {"items": {"datastore/state.db": item}, "tables": int(facts.get("tables", 0))}
        if step == "token":
            return {"items": {"datastore/token": ship(node, ["file", p["token"]], storage,
                                                       lay.item(n, "datastore/token"))}}
        if step == "api":
            listing = json.loads(node.run(kubectl(props, "get", ",".join(props["kinds"]), "-A", "-o", "json"),
                                          mutating=False, timeout=300).stdout)
            objs = export_objects(listing, props["skip_namespaces"])
            data = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=1, sort_keys=True)
            return {"items": {"api/objects.json": put(storage, lay.item(n, "api/objects.json"), data.encode())},
                    "objects": [object_name(o) for o in objs], "host_paths": host_paths_of(objs)}
        if step == "hostpath":
            found = sorted(set(props["host_paths"]) | set((done.get("api") or {}).get("host_paths") or []))
            return tar_existing(node, found, storage, lay, "hostpath.tar")
        if step == "config":
            cands = [f"/etc/systemd/system/{u}{suffix}" for u in props["all_units"]
                     for suffix in ("", ".env", ".d")] + [p["config_dir"], "/etc/systemd/system/postgresql@.service.d"]
            return tar_existing(node, cands, storage, lay, "config.tar")
        if step == "postgres":
            if not (props["audit"] or {}).get("postgres"):
                return {"items": {}, "proofs": {}}
            work = f"/var/tmp/gpu-fleet-k3s-{props['change_id']}"
            res = node.run(bash(_PROOF, work, PG_COUNTS), mutating=True, timeout=3600)
            items, proofs = {}, {}
            for line in res.stdout.strip().splitlines():
                d = json.loads(line)
                bad = count_problems(d["db"], d["source"], d["restored"], "restored")
                if bad:
                    raise FleetError(f"host {n}: the dump of database {d['db']} does not restore to its source "
                                     "in a scratch database; nothing is stopped:\n  - " + "\n  - ".join(bad))
                items[f"postgres/{d['db']}.dump"] = ship(node, ["file", d["dump"]], storage,
                                                         lay.item(n, f"postgres/{d['db']}.dump"))
                proof = {"db": d["db"], "tables": len(d["source"]), "rows": sum(d["source"].values()),
                         "source": d["source"], "restored": d["restored"], "at": now()}
                items[f"postgres/{d['db']}.proof.json"] = put(
                    storage, lay.item(n, f"postgres/{d['db']}.proof.json"), json.dumps(proof, sort_keys=True).encode())
                proofs[d["db"]] = proof
            node.run(["rm", "-rf", "--", work], mutating=True)
            return {"items": items, "proofs": proofs}
        raise AssertionError(step)

    def _state(self, props: Props, storage: Connection) -> tuple[Optional[dict], dict, Optional[str]]:
        lay = layout(props)
        return parse_steps(storage.run(bash(_STATE, lay.change, props["conn"]["name"]), mutating=False).stdout)

    def _run(self, props: Props) -> Props:
        node, storage = connect(props["conn"]), connect(props["storage"])
        _, done, _ = self._state(props, storage)
        before = sorted(done)
        ran = []
        for step in steps_for(props["role"] == "server"):
            if step in done:
                continue
            result = self._step(step, props, node, storage, done)
            put_once(storage, layout(props).marker(node.t.name, step),
                     json.dumps({**result, "at": now()}, sort_keys=True).encode())
            done[step] = result
            ran.append(step)
        baseline, done, _ = self._state(props, storage)
        items = {k: v for m in done.values() for k, v in (m.get("items") or {}).items()}
        unfinished = [s for s in steps_for(props["role"] == "server") if s not in done]
        if unfinished:
            raise FleetError(f"host {node.t.name}: K3s preserve {props['change_id']}: steps without a marker "
                             f"after running them: {', '.join(unfinished)}")
        return {**props, "items": items, "done_before": before, "ran": ran,
                "resumed": bool(before) and bool(ran),
                "baseline_at": (baseline or {}).get("at"),
                "host_paths": (done.get("api") or {}).get("host_paths") or [],
                "objects": len((done.get("api") or {}).get("objects") or []),
                "proofs": (done.get("postgres") or {}).get("proofs") or {}}

    @_entry
    def create(self, props: Props) -> CreateResult:
        return CreateResult(id_=f"{props['conn']['name']}:k3s-preserve:{props['change_id']}", outs=self._run(props))

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        how = conn_change("K3sPreserve", _id, olds, news)
        replaces = [k for k in ("change_id", "bundle_dir", "role") if olds.get(k) != news.get(k)]
        if how == "replace":
            replaces.append("conn")
        return DiffResult(changes=bool(replaces) or how == "update", replaces=replaces, stables=[],
                          delete_before_replace=True)

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        return UpdateResult(outs={**olds, "conn": news["conn"], "storage": news["storage"]})

    def read(self, id_: str, props: Props) -> ReadResult:
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id: str, props: Props) -> None:
        return None  # the bundle is kept: it is what a later rollback restores from


class K3sPreserve(Resource, module="k3s", name="Preserve"):
    items: pulumi.Output[dict]
    host_paths: pulumi.Output[list]
    proofs: pulumi.Output[dict]
    done_before: pulumi.Output[list]
    ran: pulumi.Output[list]

    def __init__(self, name: str, *, props: dict, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(K3sPreserveProvider(), name,
                         {**props, "items": None, "done_before": None, "ran": None, "resumed": None,
                          "baseline_at": None, "objects": None, "proofs": None,
                          **({} if "host_paths" in props else {"host_paths": None})}, opts)


# --- seal --------------------------------------------------------------------------------------

class K3sSealProvider(RolloutCheck):
    def key(self, props: Props) -> str:
        return f"k3s-seal:{props['change_id']}"

    def run(self, props: Props) -> dict[str, Any]:
        storage, lay = connect(props["conn"]), layout(props)
        sealed = {}
        for n, items in sorted(props["nodes"].items()):
            lines = storage.run(bash(_ITEMS, lay.node(n)), mutating=False, timeout=3600).stdout.splitlines()
            disk: dict[str, dict[str, Any]] = {}
            for ln in lines:
                sha, size, rel = ln.split(" ", 2)
                disk[rel] = {"sha256": sha, "size": int(size)}
            bad = [f"{rel}: recorded {want['sha256'][:16]}, on disk "
                   f"{disk[rel]['sha256'][:16] if rel in disk else 'missing'}"
                   for rel, want in sorted(items.items()) if disk.get(rel, {}).get("sha256") != want["sha256"]]
            if bad:
                raise FleetError(f"host {storage.t.name}: K3s bundle {lay.node(n)} does not hold what its steps "
                                 "recorded; nothing is stopped:\n  - " + "\n  - ".join(bad[:20]))
            manifest = json.dumps({"change_id": props["change_id"], "node": n, "items": items},
                                  indent=1, sort_keys=True).encode()
            put_once(storage, lay.manifest(n), manifest)
            sha = storage.run(["sha256sum", "--", lay.manifest(n)], mutating=False).stdout.split()[0]
            put_once(storage, lay.seal(n), json.dumps({"manifest_sha256": sha, "at": now()}).encode())
            sealed[n] = sha
        return {"sealed": sealed}


class K3sSeal(Resource, module="k3s", name="Seal"):
    sealed: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, bundle_dir: str, change_id: str, nodes: pulumi.Input[dict],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(K3sSealProvider(), name,
                         {"conn": conn, "bundle_dir": bundle_dir, "change_id": change_id, "nodes": nodes,
                          "triggers": {"nodes": nodes}, "sealed": None}, opts)


# --- stop and restore ----------------------------------------------------------------------------

class K3sStopProvider(ActionWithUndo):
    """Stop on create and on an update (a stop no longer in effect), the rollback on delete."""

    #: as before this base: the state keeps the pickled provider as a secret
    serialize_as_secret_always = True

    def id_of(self, props: Props) -> str:
        return f"{props['conn']['name']}:k3s-stop:{props['change_id']}"

    def _probe(self, node: Connection, props: Props) -> dict:
        return parse_stopped(node.run(bash(_STOPPED, MARKER, props["gpu_prefix"], _HOLDERS, ":".join(MOUNT_ROOTS),
                                         *props["units"]), mutating=False).stdout)

    def act(self, props: Props) -> Props:
        node = connect(props["conn"])
        if not props.get("sealed"):
            raise FleetError(f"host {node.t.name}: K3s {props['change_id']}: no sealed bundle; nothing is stopped")
        node.run(bash(_STOP, MARKER, props["change_id"], ":".join(MOUNT_ROOTS), *props["units"]),
                 mutating=True, timeout=int(props["timeout_s"]))
        seen = self._probe(node, props)
        bad = stopped_problems(seen, props["change_id"])
        if bad:
            raise FleetError(f"host {node.t.name}: K3s did not stop cleanly (change {props['change_id']}); the node "
                             "is not handed over to Slurm:\n  - " + "\n  - ".join(bad))
        return {"stopped": True, "at": now()}

    def refuse(self, olds: Props, news: Props) -> None:
        if olds.get("change_id") != news.get("change_id"):
            n = news["conn"]["name"]
            raise PlanRefused(
                f"host {n}: K3s is retired under change {olds.get('change_id')!r}; a new change ID "
                f"({news.get('change_id')!r}) retires again only after a rollback: take {n} out of "
                "k3s_retirement.retire (or destroy) and `pulumi up`, then set the new ID")

    def drifted(self, olds: Props, news: Props) -> bool:
        return olds.get("stopped") is not True

    def observe(self, props: Props) -> Props:
        seen = self._probe(connect(props["conn"]), props)
        return {"stopped": not stopped_problems(seen, props["change_id"])}

    def undo(self, props: Props) -> None:
        restore(props)


class K3sStop(Resource, module="k3s", name="Stop"):
    stopped: pulumi.Output[bool]

    def __init__(self, name: str, *, props: dict, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(K3sStopProvider(), name, {**props, "stopped": None, "at": None}, opts)
