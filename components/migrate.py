"""Fold a stack's per-object resources into the bundles that replaced them, touching no host.

    python -m components.migrate --stack <stack> [--cwd DIR] [--dry-run] [--pulumi pulumi]
    make migrate STACK=<stack> [ARGS=--dry-run]

Issue 16 made a host's three Slurm service accounts one `Accounts` resource and a node's three
Slurm configuration files one `Files` resource (components/providers/bundle.py). A state
written before holds them as separate `Account` and `File` resources, and the engine cannot
map three resources onto one: left to itself, `pulumi up` would create each bundle and then
delete the old resources, whose delete undoes what they made (the accounts removed, the
original files put back) under the bundle that just took them over. So the bundle refuses in
diff (preview, before any host is touched) until this ran.

It reads the state with `pulumi stack export` (secrets stay encrypted: nothing is decrypted),
replaces each group of old resources with one bundle that carries what they recorded (each
member's inputs, what its create remembered to undo on delete, its observed state), points
every dependency on them at the bundle, keeps the export beside the stack's state
(`.state/migrate/<stack>-<time>.json`, to `pulumi stack import` back), and writes the result
with `pulumi stack import`. A following `pulumi preview` shows no change for a host that has
not drifted. Run it with no `pulumi` command in progress on the stack.

Refuses (exit 1, changing nothing) a state with pending operations (an interrupted run:
`pulumi refresh` or `pulumi up` with the release that wrote it first), or an old resource that
holds a secret or is mid-replacement. Exit codes: 0 migrated (or nothing to migrate), 1
refused or a `pulumi` command failed, 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from .forget import references, resources_of
from .providers.bundle import AccountsProvider, BundleProvider, FilesProvider

Resource = dict[str, Any]
DYNAMIC = "pulumi-python:dynamic/host:"
SLURM = "gpu-fleet:slurm:SlurmCluster"
#: the engine's marker of a secret value in an exported state
SECRET_SIG = "4dabf18193072939515e22adb298388d"


@dataclass(frozen=True)
class Fold:
    """Old resources `<host>-<member>` (type `member_type`, children of a `parent_type`) that
    became one bundle `<host>-<bundle>` of type `bundle_type`."""

    parent_type: str
    member_type: str
    members: tuple[str, ...]
    bundle: str
    bundle_type: str
    provider: type[BundleProvider]
    when: Callable[[Resource], bool] = lambda r: True


FOLDS = (
    Fold(SLURM, DYNAMIC + "Account", ("munge-account", "slurm-account", "canary-account"), "accounts",
         DYNAMIC + "Accounts", AccountsProvider),
    # a node's copies (by hash); the controller's keep their text inline, one File each
    Fold(SLURM, DYNAMIC + "File", ("slurm.conf", "cgroup.conf", "gres.conf"), "slurm-config", DYNAMIC + "Files",
         FilesProvider, when=lambda r: "source_sha256" in (r.get("inputs") or {})),
)


class Refused(Exception):
    """The state cannot be migrated as it is; the message says why and what to do."""


def _split(urn: str) -> tuple[str, str, str, str]:
    """(urn:pulumi:<stack>, project, qualified type, name)."""
    head, project, qtype, name = urn.split("::", 3)
    return head, project, qtype, name


def _host(res: Resource) -> Optional[str]:
    conn = (res.get("inputs") or {}).get("conn")
    return conn.get("name") if isinstance(conn, dict) else None


def _has_secret(value: Any) -> bool:
    if isinstance(value, dict):
        return SECRET_SIG in value or any(_has_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_secret(v) for v in value)
    return False


def _union(lists: Iterable[Optional[list[str]]], renamed: Optional[dict[str, str]] = None,
           drop: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The URNs of `lists` in first-seen order, each once: renamed where `renamed` says, those
    in `drop` left out."""
    out: list[str] = []
    for urns in lists:
        for u in urns or []:
            u = (renamed or {}).get(u, u)
            if u not in drop and u not in out:
                out.append(u)
    return out


def groups(resources: list[Resource]) -> list[tuple[Fold, str, list[Resource]]]:
    """(fold, bundle URN, old resources in the fold's member order) for each group in the state."""
    found: dict[tuple[int, str], dict[str, Resource]] = {}
    for r in resources:
        if not r.get("custom") or not r.get("parent"):
            continue
        _, _, qtype, name = _split(r["urn"])
        host = _host(r)
        for i, f in enumerate(FOLDS):
            if r.get("type") != f.member_type or not qtype.endswith(f"{f.parent_type}${f.member_type}"):
                continue
            member = next((m for m in f.members if host and name == f"{host}-{m}"), None)
            if member is None or not f.when(r):
                continue
            key = (i, f"{r['parent']}|{host}")
            found.setdefault(key, {})[member] = r
    out = []
    for (i, _), by_member in found.items():
        f = FOLDS[i]
        first = next(iter(by_member.values()))
        head, project, parent_qtype, _ = _split(first["parent"])
        urn = f"{head}::{project}::{parent_qtype}${f.bundle_type}::{_host(first)}-{f.bundle}"
        out.append((f, urn, [by_member[m] for m in f.members if m in by_member]))
    return out


def bundle_of(fold: Fold, urn: str, old: list[Resource]) -> Resource:
    """The bundle resource as the bundle's provider would have recorded it over these members."""
    from pulumi.dynamic.dynamic import serialize_provider

    for r in old:
        if _has_secret(r.get("inputs")) or _has_secret(r.get("outputs")):
            raise Refused(f"{r['urn']} holds a secret: a bundle's members never do; leave it to `pulumi up` "
                          f"with the release that wrote it")
        if r.get("pendingReplacement") or r.get("delete"):
            raise Refused(f"{r['urn']} is in the middle of a replacement: finish it with the release that wrote "
                          f"the state (`pulumi up`), then migrate")
    provider = fold.provider()
    member = provider.member
    first = old[0]
    conn = first["inputs"]["conn"]
    name = _split(urn)[3]
    members, records, state = [], {}, {}
    for r in old:
        ins = {k: v for k, v in (r.get("inputs") or {}).items() if k not in ("__provider", "conn")}
        outs = r.get("outputs") or {}
        props = {**ins, "conn": conn}
        key = member.key(props)
        members.append({k: v for k, v in member.public_inputs(props).items() if k != "conn"})
        records[key] = {k: outs[k] for k in member.record_keys if k in outs}
        state[key] = {k: outs.get(k) for k in member.desired(props)}
    pickled = serialize_provider(provider)
    gone = {r["urn"] for r in old}
    deps = _union((r.get("dependencies") for r in old), drop=gone)
    member_deps = _union((ds for r in old for ds in (r.get("propertyDependencies") or {}).values()), drop=gone)
    res: Resource = {
        "urn": urn, "custom": True, "id": f"{_host(first)}:{name}", "type": fold.bundle_type,
        "inputs": {"__provider": pickled, "bundle": name, "conn": conn, "members": members},
        "outputs": {"__provider": pickled, "bundle": name, "conn": (first.get("outputs") or {}).get("conn", conn),
                    "members": members, "records": records, "state": state},
        "parent": first["parent"], "provider": first.get("provider"),
        "dependencies": deps or None,
        "propertyDependencies": {"__provider": [], "bundle": [], "conn": [], "members": member_deps},
        "created": min(r.get("created") or "" for r in old) or None,
        "modified": max(r.get("modified") or "" for r in old) or None,
    }
    for opt in ("protect", "retainOnDelete"):
        if any(r.get(opt) for r in old):
            res[opt] = True
    return {k: v for k, v in res.items() if v is not None}


def _ordered(resources: list[Resource]) -> list[Resource]:
    """The state's order where it holds, each resource after everything it points at."""
    urns = {r["urn"] for r in resources}
    placed: set[str] = set()
    out: list[Resource] = []
    left = list(resources)
    while left:
        rest = []
        for r in left:
            refs = {u for u in references(r) if u in urns}
            prov = (r.get("provider") or "").rsplit("::", 1)[0]
            if prov in urns:
                refs.add(prov)
            if refs <= placed:
                out.append(r)
                placed.add(r["urn"])
            else:
                rest.append(r)
        if len(rest) == len(left):  # the engine records no cycle; keep what is left as it was
            out += rest
            break
        left = rest
    return out


def migrate(state: dict) -> tuple[dict, list[tuple[str, list[str]]]]:
    """The migrated state and, for each bundle made, its URN and the URNs it replaced."""
    dep = state.get("deployment") or {}
    if dep.get("pending_operations"):
        ops = ", ".join(f"{o.get('type')} {o.get('resource', {}).get('urn')}" for o in dep["pending_operations"])
        raise Refused(f"the state records operations an interrupted run left pending ({ops}): run `pulumi refresh` "
                      f"(or `pulumi up`) with the release that wrote it first, then migrate")
    resources = resources_of(state)
    made: list[tuple[str, list[str]]] = []
    renamed: dict[str, str] = {}
    replacing: dict[str, Resource] = {}
    existing = {r["urn"] for r in resources}
    for fold, urn, old in groups(resources):
        if urn in existing:
            raise Refused(f"{urn} is already in the state beside the resources it replaces "
                          f"({', '.join(r['urn'] for r in old)}); `pulumi state delete` the ones that are stale")
        b = bundle_of(fold, urn, old)
        replacing[old[-1]["urn"]] = b
        for r in old:
            renamed[r["urn"]] = urn
        made.append((urn, [r["urn"] for r in old]))
    if not made:
        return state, []

    new: list[Resource] = []
    for r in resources:
        if r["urn"] in replacing:
            new.append(replacing[r["urn"]])
        if r["urn"] in renamed:
            continue
        r = dict(r)
        if r.get("dependencies"):
            r["dependencies"] = _union([r["dependencies"]], renamed)
        if r.get("propertyDependencies"):
            r["propertyDependencies"] = {k: _union([v], renamed) for k, v in r["propertyDependencies"].items()}
        if r.get("deletedWith") in renamed:
            r["deletedWith"] = renamed[r["deletedWith"]]
        new.append(r)
    out = {**state, "deployment": {**dep, "resources": _ordered(new)}}
    return out, made


def _say(msg: str) -> None:
    print(f"migrate: {msg}", flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m components.migrate", description=__doc__.splitlines()[0])
    ap.add_argument("--stack", required=True)
    ap.add_argument("--cwd", default=".", help="the project directory (default: .)")
    ap.add_argument("--dry-run", action="store_true", help="say what would be folded; write nothing")
    ap.add_argument("--pulumi", default="pulumi", help="the Pulumi CLI (default: pulumi on PATH)")
    a = ap.parse_args(argv)
    cwd = Path(a.cwd)
    p = subprocess.run([a.pulumi, "stack", "export", "--stack", a.stack], cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        _say(f"`pulumi stack export --stack {a.stack}` failed (exit {p.returncode}):\n{p.stderr.strip()}")
        return 1
    state = json.loads(p.stdout or "{}")
    try:
        new, made = migrate(state)
    except Refused as e:
        _say(f"stack {a.stack}: nothing changed: {e}")
        return 1
    if not made:
        _say(f"stack {a.stack}: nothing to migrate (no per-object resource a bundle replaced)")
        return 0
    old = sum(len(m) for _, m in made)
    _say(f"stack {a.stack}: {old} resource(s) into {len(made)} bundle(s) (the state only; no host is touched):")
    for urn, members in made:
        print(f"  {urn.rsplit('::', 1)[1]} <- " + ", ".join(m.rsplit("::", 1)[1] for m in members))
    if a.dry_run:
        _say("dry run: nothing written")
        return 0
    keep = cwd / ".state" / "migrate"
    keep.mkdir(parents=True, exist_ok=True, mode=0o700)
    backup = keep / f"{a.stack}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    backup.write_text(p.stdout)
    os.chmod(backup, 0o600)
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=keep, delete=False) as f:
        json.dump(new, f)
    try:
        r = subprocess.run([a.pulumi, "stack", "import", "--stack", a.stack, "--file", f.name],
                           cwd=cwd, capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        _say(f"`pulumi stack import` failed (exit {r.returncode}); the state is as it was:\n"
             f"{(r.stdout + r.stderr).strip()}")
        return 1
    _say(f"stack {a.stack}: migrated; the state before is kept in {backup} "
         f"(`pulumi stack import --stack {a.stack} --file {backup}` puts it back)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
