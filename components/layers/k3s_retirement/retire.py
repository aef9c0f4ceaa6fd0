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
import re
import time
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from ...errors import FleetError
from ...providers.base import PlanRefused, Props, RolloutCheck, _entry, conn_change
from ...providers.undoable import ActionWithUndo
from ...scripts import script, sections
from ...kit import bash, connect
from ...transport import Connection, FanOutError, SshTarget, fan_out
from .bundle import (
    MARKER, MOUNT_ROOTS, Layout, count_problems, export_objects, host_paths_of, judge_audit,
    node_ready, object_name, parse_audit, parse_steps, parse_stopped, steps_for, stopped_problems,
)

_AUDIT = script(__file__, "audit.sh")
_SEND = script(__file__, "send.sh")
_RECEIVE = script(__file__, "receive.sh")
_STATE = script(__file__, "bundle_state.sh")
_ONCE = script(__file__, "put_once.sh")
_ITEMS = script(__file__, "verify_items.sh")
_BACKUP = script(__file__, "datastore_backup.sh")
_COUNTS = script(__file__, "pg_counts.sh")
_PROOF = script(__file__, "pg_proof.sh")
_STOP = script(__file__, "stop.sh")
_STOPPED = script(__file__, "stopped_probe.sh")
_RESTORE = script(__file__, "restore.sh")
_HOLDERS = script(__file__, "gpu_holders.sh")
_SERVER_CHECK = script(__file__, "server_check.sh")
_SHA = re.compile(r"gpu-fleet-sha256 ([0-9a-f]{64})")


def _layout(props: Props) -> Layout:
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


def _tar_existing(node: Connection, paths: list[str], storage: Connection, lay: Layout, rel: str) -> dict:
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


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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
        lay, n, p = _layout(props), node.t.name, props["paths"]
        if step == "baseline":
            body = {"change_id": props["change_id"], "node": n, "at": _now(), "role": props["role"],
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
            return _tar_existing(node, found, storage, lay, "hostpath.tar")
        if step == "config":
            cands = [f"/etc/systemd/system/{u}{suffix}" for u in props["all_units"]
                     for suffix in ("", ".env", ".d")] + [p["config_dir"], "/etc/systemd/system/postgresql@.service.d"]
            return _tar_existing(node, cands, storage, lay, "config.tar")
        if step == "postgres":
            if not (props["audit"] or {}).get("postgres"):
                return {"items": {}, "proofs": {}}
            work = f"/var/tmp/gpu-fleet-k3s-{props['change_id']}"
            res = node.run(bash(_PROOF, work, _COUNTS), mutating=True, timeout=3600)
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
                         "source": d["source"], "restored": d["restored"], "at": _now()}
                items[f"postgres/{d['db']}.proof.json"] = put(
                    storage, lay.item(n, f"postgres/{d['db']}.proof.json"), json.dumps(proof, sort_keys=True).encode())
                proofs[d["db"]] = proof
            node.run(["rm", "-rf", "--", work], mutating=True)
            return {"items": items, "proofs": proofs}
        raise AssertionError(step)

    def _state(self, props: Props, storage: Connection) -> tuple[Optional[dict], dict, Optional[str]]:
        lay = _layout(props)
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
            put_once(storage, _layout(props).marker(node.t.name, step),
                     json.dumps({**result, "at": _now()}, sort_keys=True).encode())
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
        storage, lay = connect(props["conn"]), _layout(props)
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
            put_once(storage, lay.seal(n), json.dumps({"manifest_sha256": sha, "at": _now()}).encode())
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
        return {"stopped": True, "at": _now()}

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


def _wait(what: str, host: str, timeout_s: int, probe) -> Any:
    """Poll `probe` (-> (done, value, why)) every 2 s until done or the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, value, why = probe()
        if done:
            return value
        if time.monotonic() > deadline:
            raise FleetError(f"host {host}: K3s rollback: {what} not within {timeout_s} s: {why}")
        time.sleep(2)


def restore(props: Props) -> dict:
    """The rollback of one node (see the module docstring); raises unless the node is back whole."""
    node, storage, lay = connect(props["conn"]), connect(props["storage"]), _layout(props)
    n, p, items, timeout = node.t.name, props["paths"], props["items"] or {}, int(props["timeout_s"])
    done: dict[str, Any] = {}
    if props["role"] == "server":
        chk = sections(node.run(bash(_SERVER_CHECK, p["datastore"], p["token"]), mutating=False).stdout)
        want_token = (items.get("datastore/token") or {}).get("sha256")
        if want_token and chk.get("token", "").strip() != want_token:
            ship(storage, ["file", lay.item(n, "datastore/token")], node, p["token"])
            done["token"] = "restored from the bundle"
        if chk.get("datastore", "").strip() != "ok" and "datastore/state.db" in items:
            aside = f"{p['datastore']}.gpu-fleet-aside-{int(time.time())}"
            node.run(["sh", "-c", 'for s in "" -wal -shm; do [ -e "$1$s" ] && mv -- "$1$s" "$2$s"; done; true',
                      "sh", p["datastore"], aside], mutating=True)
            ship(storage, ["file", lay.item(n, "datastore/state.db")], node, p["datastore"])
            done["datastore"] = f"restored from the bundle ({chk.get('datastore', '').strip()}; kept as {aside})"
    # the immutable baseline says what K3s ran before the retirement (not a later audit)
    base = storage.run(["cat", "--", lay.baseline(n)], mutating=False, check=False)
    baseline = json.loads(base.stdout) if base.rc == 0 and base.stdout.strip() else {"audit": props.get("audit")}
    services = (baseline.get("audit") or {}).get("services") or {}
    enable = [u for u in props["units"] if (services.get(u) or {}).get("enabled") == "enabled"]
    start = [u for u in props["units"] if (services.get(u) or {}).get("active") == "active"]
    node.run(bash(_RESTORE, MARKER, ":".join(enable), ":".join(start), *props["units"]), mutating=True,
             timeout=timeout)
    server = connect(props["server"])
    if props["role"] == "server":
        _wait("the API server ready", n, timeout, lambda: (
            (r := server.run(kubectl(props, "get", "--raw", "/readyz"), mutating=False, check=False)).rc == 0,
            None, (r.stdout + r.stderr).strip()[-300:]))
        objs = json.loads(storage.run(["cat", "--", lay.item(n, "api/objects.json")], mutating=False).stdout)
        missing = _missing(props, server, objs)
        if missing:
            # right after the API server starts, a Service may not get its IP yet ("range is
            # full" until the allocator has synced): try a few times, then report what is left
            still = missing
            for _ in range(5):
                server.run(kubectl(props, "create", "-f", "-"), mutating=True, check=False,
                           stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": still}).encode())
                still = _missing(props, server, objs)
                if not still:
                    break
                time.sleep(3)
            if still:
                raise FleetError(f"host {n}: K3s rollback: objects still missing after creating them from the "
                                 f"bundle: {', '.join(object_name(o) for o in still[:10])}")
        done["objects"] = {"exported": len(objs["items"]), "created_again": len(missing)}
    proofs = props.get("proofs") or {}
    if proofs:
        _wait("PostgreSQL accepting connections", n, timeout, lambda: (
            (r := node.run(["runuser", "-u", "postgres", "--", "pg_isready"], mutating=False, check=False)).rc == 0,
            None, r.stdout.strip()))
        for db, proof in sorted(proofs.items()):
            live = node.run(bash(_COUNTS, db), mutating=False, check=False)
            if live.rc != 0:
                work = f"/var/tmp/gpu-fleet-k3s-restore-{props['change_id']}"
                node.run(["install", "-d", "-m", "0700", "-o", "postgres", "--", work], mutating=True)
                ship(storage, ["file", lay.item(n, f"postgres/{db}.dump")], node, f"{work}/{db}.dump")
                node.run(["sh", "-c", 'chown postgres "$1" && runuser -u postgres -- pg_restore --create '
                          '--exit-on-error -d postgres -- "$1"', "sh", f"{work}/{db}.dump"], mutating=True,
                         timeout=3600)
                node.run(["rm", "-rf", "--", work], mutating=True)
                live = node.run(bash(_COUNTS, db), mutating=False)
                done[f"postgres/{db}"] = "restored from the bundle's dump"
            bad = count_problems(db, proof["source"], json.loads(live.stdout), "after the rollback")
            if bad:
                raise FleetError(f"host {n}: K3s rollback: PostgreSQL {db} differs from the retirement's proof:\n  - "
                                 + "\n  - ".join(bad))
    if start:
        within = int(props["ready_within_s"])

        def ready() -> tuple[bool, None, str]:
            nodes = json.loads(server.run(kubectl(props, "get", "nodes", "-o", "json"), mutating=False).stdout)
            ok, why = node_ready(nodes, n, within)
            return ok, None, why

        _wait(f"node {n} Ready", n, timeout, ready)
    return done


def _missing(props: Props, server: Connection, objs: dict) -> list[dict]:
    """The bundle's objects the API server does not have (kind, namespace and name)."""
    got = json.loads(server.run(kubectl(props, "get", "-f", "-", "-o", "json", "--ignore-not-found"),
                                mutating=False, stdin=json.dumps(objs).encode()).stdout or "{}")
    items = got.get("items", [got] if got.get("kind") not in (None, "List") else [])
    have = {object_name(o) for o in items}
    return [o for o in objs["items"] if object_name(o) not in have]
