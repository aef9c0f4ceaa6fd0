"""The two checks that make the model snapshot a rollout step rather than a hope.

- `Snapshot`, on the storage host: when the pinned revision is not published yet, it starts
  the download unit (download, prove, check, publish) and waits for it; then, published or
  not before, it runs the independent check on the published tree (sizes, JSON, safetensors
  headers, indexes, against the snapshot's own manifest). A unit that failed fails the
  rollout with that run's journal lines; a published snapshot that fails its check is
  never touched (it is read-only for good), the rollout stops naming it. Refresh runs the
  same read-only check, so a damaged or vanished snapshot shows as drift; destroy keeps it.
- `SnapshotView`, on every node that mounts the models store, at once: the manifest's files
  with their sizes, the acceptance marker readable, a write into the snapshot refused.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pulumi
from pulumi.dynamic import ReadResult, Resource

from ...errors import FleetError
from ...providers.base import RolloutCheck
from ...providers.parts import Props, _entry, target_of
from ...scripts import script, sections
from ...transport import FanOutError, SshTarget, connection, fan_out
from ...kit import sh

_PROBE = script(__file__, "snapshot_probe.sh")
_FAILURE = script(__file__, "unit_failure.sh")
_VIEW = script(__file__, "node_view.sh")
#: the snapshot's own files that the hub does not list
OWN = ".gpu-fleet/"


def parse_probe(stdout: str) -> dict[str, Any]:
    """Pure: the storage host's probe -> {published, manifest_sha256, files (path -> size),
    check, status}."""
    sec = sections(stdout)
    check = status = None
    try:
        check = json.loads(sec.get("check", "").strip() or "null")
    except ValueError:
        check = {"problems": [f"verify.py check printed no JSON: {sec.get('check', '').strip()[-500:]}"]}
    try:
        status = json.loads(sec.get("status", "").strip() or "null")
    except ValueError:
        status = None
    try:
        manifest = json.loads(sec.get("manifest", "").strip() or "null") or {}
    except ValueError:
        manifest = {}
    return {"published": sec.get("published", "").strip() == "yes",
            "manifest_sha256": sec.get("manifest-sha256", "").strip() or None,
            "files": {f["path"]: f["size"] for f in manifest.get("files", []) if isinstance(f, dict)},
            "check": check, "status": status}


def problems_of(check: Optional[dict]) -> list[str]:
    """What fails a published tree: the check's problems, and any file its manifest does not
    list (besides the snapshot's own `.gpu-fleet/`): a published snapshot never gains files."""
    if not check:
        return ["verify.py check printed nothing"]
    extra = [p for p in check.get("extra") or [] if not p.startswith(OWN)]
    return list(check.get("problems") or []) + [f"{p} is in the snapshot but not in its manifest" for p in extra]


def summary(check: dict) -> dict[str, Any]:
    """What the stack output shows of the independent check."""
    st = check.get("safetensors") or {}
    return {"files": check.get("files"), "bytes": check.get("bytes"),
            "json": sorted(check.get("json") or {}), "safetensors": len(st),
            "tensors": sum(v.get("tensors", 0) for v in st.values()),
            "indexes": sorted(check.get("indexes") or {}), "problems": list(check.get("problems") or [])}


class SnapshotProvider(RolloutCheck):
    rerun_on = ("triggers", "repo_id", "revision", "dest", "marker")

    def key(self, props: Props) -> str:
        return f"model:{props['repo_id']}@{props['revision'][:12]}"

    def _probe(self, conn, props: Props) -> dict[str, Any]:
        res = conn.run(sh(_PROBE, props["python"], props["verify"], props["dest"], props["manifest"],
                          props["state"]), mutating=False, check=False, timeout=900)
        return parse_probe(res.stdout)

    def run(self, props: Props) -> dict[str, Any]:
        conn = connection(target_of(props))
        conn.connect()
        seen = self._probe(conn, props)
        ran = False
        if not seen["published"]:
            ran = True
            start = conn.run(["systemctl", "start", "--", props["unit"]], mutating=True, check=False,
                             timeout=int(props["timeout_s"]) + 120)
            if start.rc != 0:
                why = conn.run(sh(_FAILURE, props["unit"]), mutating=False, check=False)
                raise FleetError(
                    f"host {conn.t.name}: model snapshot {props['repo_id']}@{props['revision']}: the download "
                    f"unit {props['unit']} failed (systemctl start exit code {start.rc}); nothing is published "
                    f"at {props['dest']}, partial data stays in {props['stage']}:\n    "
                    + why.stdout.strip().replace("\n", "\n    "))
            seen = self._probe(conn, props)
            if not seen["published"]:
                raise FleetError(f"host {conn.t.name}: the download unit {props['unit']} succeeded, yet "
                                 f"{props['dest']} has no manifest ({props['manifest']})")
        problems = problems_of(seen["check"])
        if problems:
            raise FleetError(
                f"host {conn.t.name}: the published snapshot {props['dest']} fails its independent check; "
                "the layer never modifies a published snapshot: move it aside (or restore it) and run "
                "`pulumi up` again:\n  - " + "\n  - ".join(problems[:20]))
        if props["marker"] not in seen["files"]:
            raise FleetError(f"host {conn.t.name}: the published snapshot {props['dest']} has no "
                             f"{props['marker']} (model_snapshot.marker), which the acceptance job reads")
        return {"ok": True, "manifest_sha256": seen["manifest_sha256"], "files": seen["files"],
                "checks": summary(seen["check"]),
                "download": {"ran_this_up": ran, **(seen["status"] or {})}}

    @_entry
    def read(self, id_: str, props: Props) -> ReadResult:
        """Refresh: the same read-only check; a snapshot gone or damaged is recorded as not ok."""
        conn = connection(target_of(props))
        conn.connect()
        seen = self._probe(conn, props)
        ok = bool(seen["published"] and not problems_of(seen["check"])
                  and seen["manifest_sha256"] == props.get("manifest_sha256"))
        return ReadResult(id_=id_, outs={**props, "ok": ok})

    def rerun(self, olds: Props, news: Props) -> bool:
        return olds.get("ok") is not True or super().rerun(olds, news)


class Snapshot(Resource, module="model", name="Snapshot"):
    """The pinned revision published and proven on the storage host (destroy keeps it)."""

    ok: pulumi.Output[bool]
    manifest_sha256: pulumi.Output[str]
    files: pulumi.Output[dict]
    checks: pulumi.Output[dict]
    download: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, repo_id: str, revision: str, unit: str, python: str,
                 verify: str, stage: str, state: str, dest: str, manifest: str, marker: str, timeout_s: int,
                 triggers: pulumi.Input[dict], opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(SnapshotProvider(), name,
                         {"conn": conn, "repo_id": repo_id, "revision": revision, "unit": unit,
                          "python": python, "verify": verify, "stage": stage, "state": state, "dest": dest,
                          "manifest": manifest, "marker": marker, "timeout_s": timeout_s,
                          "triggers": triggers, "ok": None, "manifest_sha256": None, "files": None, "checks": None,
                          "download": None}, opts)


def judge_view(stdout: str, files: dict[str, int]) -> list[str]:
    """Pure: one node's view -> every failed check, as a sentence."""
    sec = sections(stdout)
    seen: dict[str, int] = {}
    for line in sec.get("files", "").splitlines():
        size, _, path = line.partition(" ")
        if size.isdigit() and path and not path.startswith(OWN):
            seen[path] = int(size)
    fails = []
    missing = sorted(set(files) - set(seen))
    if missing:
        fails.append(f"{len(missing)} of the manifest's {len(files)} files are missing: {', '.join(missing[:5])}"
                     + (f" (find: {sec.get('files', '').strip()[:200]})" if not seen else ""))
    wrong = sorted(p for p in set(files) & set(seen) if files[p] != seen[p])
    fails += [f"{p} is {seen[p]} bytes, the manifest says {files[p]}" for p in wrong[:5]]
    extra = sorted(set(seen) - set(files))
    if extra:
        fails.append(f"files the manifest does not list: {', '.join(extra[:5])}")
    if sec.get("marker", "").strip() != "readable":
        fails.append("the acceptance marker is not readable")
    write = sec.get("write", "").strip()
    if not write.startswith("refused") or "Read-only file system" not in write:
        fails.append(f"a write into the snapshot was {write[:200] or 'not tried'} "
                     "(expected: refused, Read-only file system)")
    return fails


class SnapshotViewProvider(RolloutCheck):
    def key(self, props: Props) -> str:
        return "model-view"

    def run(self, props: Props) -> dict[str, Any]:
        argv = sh(_VIEW, props["path"], props["marker"])
        wanted = set(props["on"])

        def probe(c):
            c.connect()
            return c.run(argv, mutating=False, check=False, timeout=180).stdout

        targets = [SshTarget.from_dict(n) for n in props["nodes"] if n["name"] in wanted]
        try:
            out = fan_out(targets, probe, max_parallel=int(props["max_parallel"]))
        except FanOutError as e:
            raise FleetError(f"model snapshot view: not every node could be probed over SSH:\n{e}") from None
        fails = {n: f for n, text in sorted(out.items()) if (f := judge_view(text, props["files"]))}
        if fails:
            raise FleetError(
                f"model snapshot {props['path']}: not every node sees it whole and read-only; the "
                "acceptance does not run:\n" + "\n".join(
                    f"  {n}:\n" + "\n".join(f"    - {x}" for x in f) for n, f in fails.items()))
        return {"seen_by": sorted(out)}


class SnapshotView(Resource, module="model", name="SnapshotView"):
    seen_by: pulumi.Output[list]

    def __init__(self, name: str, *, conn: dict, nodes: list[dict], on: pulumi.Input[list], path: str,
                 marker: str, files: pulumi.Input[dict], max_parallel: int, triggers: dict,
                 opts: Optional[pulumi.ResourceOptions] = None):
        """`conn`: the storage host's (names the check); `nodes`: every node's conn; `on`: the
        nodes that mount the store (the storage layer's passed nodes)."""
        super().__init__(SnapshotViewProvider(), name,
                         {"conn": conn, "nodes": nodes, "on": on, "path": path, "marker": marker,
                          "files": files, "max_parallel": max_parallel,
                          "triggers": {**triggers, "on": on, "files": files}, "seen_by": None}, opts)
