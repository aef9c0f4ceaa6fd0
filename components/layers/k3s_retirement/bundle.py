"""Pure parts of the K3s retirement: the bundle's layout, the exported objects, the audit's
verdict, the stop's verdict, the batches, Ready, and the PostgreSQL proof. No host, no engine.

The bundle of one change on the storage host:

    <bundle_dir>/<change_id>/<node>/baseline.json   immutable (0400): what the node was
    <bundle_dir>/<change_id>/<node>/steps/<step>.done   one marker per finished step
    <bundle_dir>/<change_id>/<node>/items/...        datastore, token, api/objects.json,
                                                     hostpath.tar, config.tar, postgres/<db>.dump
    <bundle_dir>/<change_id>/<node>/manifest.json    SHA-256 and size of every item
    <bundle_dir>/<change_id>/<node>/SEAL             immutable: the manifest's SHA-256, last
"""

from __future__ import annotations

import calendar
import json
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ...scripts import sections

#: the node's marker file that the units' drop-in condition names
MARKER = "/etc/gpu-fleet/k3s-retired"
#: where K3s and its pods leave mounts behind (what k3s-killall.sh unmounts)
MOUNT_ROOTS = ("/var/lib/kubelet", "/run/k3s", "/var/lib/rancher/k3s/agent/containerd")
#: the steps of one node's preserve, in order (a server's first three, then every node's)
SERVER_STEPS = ("baseline", "datastore", "token", "api")
NODE_STEPS = ("hostpath", "config", "postgres")
#: metadata the API server sets itself: an export without it can be created again
_SERVER_SET = ("uid", "resourceVersion", "managedFields", "creationTimestamp", "generation",
               "selfLink", "ownerReferences")


@dataclass(frozen=True)
class Layout:
    bundle_dir: str
    change_id: str

    @property
    def change(self) -> str:
        return f"{self.bundle_dir}/{self.change_id}"

    def node(self, n: str) -> str:
        return f"{self.change}/{n}"

    def item(self, n: str, rel: str) -> str:
        return f"{self.node(n)}/items/{rel}"

    def marker(self, n: str, step: str) -> str:
        return f"{self.node(n)}/steps/{step}.done"

    def baseline(self, n: str) -> str:
        return f"{self.node(n)}/baseline.json"

    def manifest(self, n: str) -> str:
        return f"{self.node(n)}/manifest.json"

    def seal(self, n: str) -> str:
        return f"{self.node(n)}/SEAL"


def steps_for(is_server: bool) -> tuple[str, ...]:
    return (SERVER_STEPS if is_server else ("baseline",)) + NODE_STEPS


# --- exported objects ------------------------------------------------------------------------

def strip_object(obj: dict) -> dict:
    """An API object as a manifest: status and what the API server sets itself removed."""
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _SERVER_SET}
    ann = {k: v for k, v in (meta.get("annotations") or {}).items()
           if k != "deployment.kubernetes.io/revision"}
    if ann:
        meta["annotations"] = ann
    else:
        meta.pop("annotations", None)
    out["metadata"] = meta
    if obj.get("kind") == "Service":  # the cluster IP is allocated again on create
        spec = {k: v for k, v in (obj.get("spec") or {}).items() if k not in ("clusterIP", "clusterIPs")}
        out["spec"] = spec
    return out


def export_objects(listing: dict, skip_namespaces: Iterable[str]) -> list[dict]:
    """`kubectl get <kinds> -A -o json` -> the workload intent: the namespaces they live in
    first, then every object stripped, in a stable order."""
    skip = set(skip_namespaces)
    objs = [strip_object(o) for o in listing.get("items") or []
            if (o.get("metadata") or {}).get("namespace") not in skip]
    objs.sort(key=lambda o: (o.get("kind", ""), o["metadata"].get("namespace", ""), o["metadata"].get("name", "")))
    namespaces = sorted({o["metadata"]["namespace"] for o in objs if o["metadata"].get("namespace")})
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in namespaces] + objs


def object_name(obj: dict) -> str:
    """kind/namespace/name, as restore reports it."""
    m = obj.get("metadata") or {}
    return "/".join(x for x in (obj.get("kind", "?"), m.get("namespace", ""), m.get("name", "?")) if x)


def host_paths_of(objects: Iterable[dict]) -> list[str]:
    """The hostPath volumes the exported objects' pod templates use (their data is preserved
    on every retired node that has it)."""
    found: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            hp = v.get("hostPath")
            if isinstance(hp, dict) and isinstance(hp.get("path"), str):
                found.add(hp["path"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for o in objects:
        walk(o.get("spec"))
    return sorted(p for p in found if p.startswith("/") and p != "/")


# --- audit -------------------------------------------------------------------------------------

def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in (text or "").splitlines() if ln.strip()]


def parse_audit(stdout: str) -> dict[str, Any]:
    """audit.sh's sections -> the node's facts (what the stack output shows)."""
    sec = sections(stdout)
    lscpu = {}
    for ln in _lines(sec.get("lscpu", "")):
        k, _, v = ln.partition(":")
        lscpu[k.strip()] = v.strip()
    services = {}
    for ln in _lines(sec.get("services", "")):
        parts = ln.split()
        if parts:
            services[parts[0]] = {"enabled": parts[1] if len(parts) > 1 else "",
                                  "active": parts[2] if len(parts) > 2 else ""}
    holders = []
    for ln in _lines(sec.get("gpu_holders", "")):
        pid, _, rest = ln.partition(" ")
        comm, _, dev = rest.rpartition(" ")
        holders.append({"pid": int(pid) if pid.isdigit() else pid, "comm": comm, "device": dev})
    gpus = []
    for ln in _lines(sec.get("nvidia_smi", "")):
        f = [x.strip() for x in ln.split(",")]
        if len(f) == 4 and f[0].isdigit():
            gpus.append({"index": int(f[0]), "uuid": f[1], "name": f[2], "driver": f[3]})

    def num(name: str) -> Optional[int]:
        v = sec.get(name, "").strip()
        return int(v) if v.isdigit() else None

    mem = num("mem_kib")
    return {
        "cpus": num("cpus"),
        "topology": {"sockets": lscpu.get("Socket(s)"), "cores_per_socket": lscpu.get("Core(s) per socket"),
                     "threads_per_core": lscpu.get("Thread(s) per core"), "model": lscpu.get("Model name")},
        "memory_mib": mem // 1024 if mem is not None else None,
        "gpu_devices": _lines(sec.get("gpu_devices", "")),
        "gpus": gpus,
        "gpu_holders": holders,
        "services": services,
        "postgres": sec.get("postgres", "").strip() == "running",
        "mounts": _lines(sec.get("mounts", "")),
        "ntp_synchronized": sec.get("ntp", "").strip() or "unknown",
        "cgroup": sec.get("cgroup", "").strip() or None,
        "root_free_mib": num("root_free_mib"),
        "slurmd_c": sec.get("slurmd_c", "").strip() or None,
    }


def judge_audit(name: str, spec: dict, facts: dict) -> list[str]:
    """Where a node's scheduling resources differ from the stack's node spec, each a sentence
    naming both values (a difference stops the whole retirement)."""
    out = []
    if facts.get("cpus") != spec["cpus"]:
        out.append(f"node {name}: {facts.get('cpus')} CPUs online, the stack declares cpus: {spec['cpus']}")
    mem = facts.get("memory_mib")
    if mem is None or mem < spec["real_memory_mib"]:
        out.append(f"node {name}: {mem} MiB of memory, less than the stack's real_memory_mib: "
                   f"{spec['real_memory_mib']}")
    want = spec.get("gpus") or 0
    have = len(facts.get("gpu_devices") or [])
    if have != want:
        out.append(f"node {name}: {have} GPU devices, the stack declares gpus.count: {want}")
    if facts.get("gpus") and len(facts["gpus"]) != want:
        out.append(f"node {name}: nvidia-smi lists {len(facts['gpus'])} GPUs, the stack declares {want}")
    return out


def batches(agents: list[str], size: int) -> list[list[str]]:
    """Agents in stop order, `size` at a time (the server is stopped after the last batch)."""
    return [agents[i:i + size] for i in range(0, len(agents), size)]


# --- stop ----------------------------------------------------------------------------------------

def parse_stopped(stdout: str) -> dict[str, Any]:
    sec = sections(stdout)
    units = {}
    for ln in _lines(sec.get("units", "")):
        p = ln.split()
        if p:
            units[p[0]] = {"enabled": p[1] if len(p) > 1 else "", "active": p[2] if len(p) > 2 else "",
                           "condition": (p[3] if len(p) > 3 else "") == "yes"}
    return {"units": units, "marker": sec.get("marker", "").strip() or None,
            "k3s_procs": _lines(sec.get("k3s_procs", "")),
            "gpu_holders": _lines(sec.get("gpu_holders", "")),
            "mounts": _lines(sec.get("mounts", ""))}


def stopped_problems(seen: dict, change_id: str) -> list[str]:
    """Why a node does not count as retired (empty: it does)."""
    out = []
    for u, st in seen["units"].items():
        if st["enabled"] not in ("disabled", "masked", ""):
            out.append(f"{u} is {st['enabled']}")
        if st["active"] not in ("inactive", "failed", "unknown", ""):
            out.append(f"{u} is {st['active']}")
        if not st["condition"]:
            out.append(f"{u} has no drop-in condition on {MARKER}")
    if seen["marker"] != change_id:
        out.append(f"{MARKER} holds {seen['marker']!r}, not the change {change_id!r}")
    out += [f"K3s process left: {p}" for p in seen["k3s_procs"][:10]]
    out += [f"a GPU device is held: {h}" for h in seen["gpu_holders"][:10]]
    out += [f"still mounted: {m}" for m in seen["mounts"][:10]]
    return out


# --- restore ---------------------------------------------------------------------------------

def node_ready(listing: dict, name: str, within_s: int, now: Optional[float] = None) -> tuple[bool, str]:
    """Whether `kubectl get nodes -o json` shows `name` Ready with a fresh heartbeat (nothing
    flips a dead agent's Ready to Unknown without a controller-manager, so age counts too)."""
    now = time.time() if now is None else now
    for n in listing.get("items") or []:
        if (n.get("metadata") or {}).get("name") != name:
            continue
        for c in (n.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready":
                beat = c.get("lastHeartbeatTime") or ""
                try:
                    age = now - calendar.timegm(time.strptime(beat, "%Y-%m-%dT%H:%M:%SZ"))
                except ValueError:
                    return False, f"Ready heartbeat {beat!r} unreadable"
                if c.get("status") != "True":
                    return False, f"Ready is {c.get('status')}"
                if age > within_s:
                    return False, f"Ready, but the last heartbeat is {int(age)} s old"
                return True, f"Ready, heartbeat {int(age)} s ago"
        return False, "no Ready condition"
    return False, "no Node object"


def count_problems(db: str, want: dict[str, int], have: dict[str, int], what: str) -> list[str]:
    """A PostgreSQL database's tables and rows against the proof's: every difference."""
    out = []
    if len(have) != len(want):
        out.append(f"{db}: {len(have)} user tables {what}, the proof has {len(want)}")
    for t in sorted(set(want) | set(have)):
        if want.get(t) != have.get(t):
            out.append(f"{db}.{t}: {have.get(t)} rows {what}, the proof has {want.get(t)}")
    return out[:20]


def parse_steps(stdout: str) -> tuple[Optional[dict], dict[str, dict], Optional[str]]:
    """bundle_state.sh -> (baseline, step -> marker, seal text)."""
    sec = sections(stdout)
    try:
        baseline = json.loads(sec.get("baseline", "").strip() or "null")
    except ValueError:
        baseline = None
    steps = {}
    for ln in _lines(sec.get("steps", "")):
        step, _, body = ln.partition(" ")
        try:
            steps[step] = json.loads(body)
        except ValueError:
            steps[step] = {"unreadable": body[:200]}
    return baseline, steps, sec.get("seal", "").strip() or None
