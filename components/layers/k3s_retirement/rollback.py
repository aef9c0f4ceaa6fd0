"""The rollback of one retired node (K3sStop's delete): the datastore and token checked
against the bundle (restored from it only when missing or damaged), units back as the
baseline had them, then every exported object present, PostgreSQL proven with the proof's
tables and rows, and the node Ready with a fresh heartbeat."""

from __future__ import annotations

import json
import time
from typing import Any

from ...errors import FleetError
from ...kit import bash, connect
from ...providers.parts import Props
from ...scripts import script, sections
from ...transport import Connection
from .bundle import MARKER, count_problems, node_ready, object_name
from .transfer import kubectl, layout, ship

PG_COUNTS = script(__file__, "pg_counts.sh")
_RESTORE = script(__file__, "restore.sh")
_SERVER_CHECK = script(__file__, "server_check.sh")


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
    node, storage, lay = connect(props["conn"]), connect(props["storage"]), layout(props)
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
            live = node.run(bash(PG_COUNTS, db), mutating=False, check=False)
            if live.rc != 0:
                work = f"/var/tmp/gpu-fleet-k3s-restore-{props['change_id']}"
                node.run(["install", "-d", "-m", "0700", "-o", "postgres", "--", work], mutating=True)
                ship(storage, ["file", lay.item(n, f"postgres/{db}.dump")], node, f"{work}/{db}.dump")
                node.run(["sh", "-c", 'chown postgres "$1" && runuser -u postgres -- pg_restore --create '
                          '--exit-on-error -d postgres -- "$1"', "sh", f"{work}/{db}.dump"], mutating=True,
                         timeout=3600)
                node.run(["rm", "-rf", "--", work], mutating=True)
                live = node.run(bash(PG_COUNTS, db), mutating=False)
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
