"""The seed's seven criteria of done, each with the evidence this `up` produced (pure).

A criterion is `met` only on evidence read back from jobs and hosts in this run; one a stack
does not build says so (`not in this stack`, `not built`), never green. The checks named
here are node_checks' and the all-node job's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

TITLES = (
    "All nodes and GPUs recognized by the scheduler",
    "GPU, CPU, memory and device access confined by cgroups",
    "Models read-only, job data writable, a failed job pollutes nothing",
    "Accounting records generic and typed GPU TRES",
    "The web view on the tailnet only, the admin plane not exposed",
    "K3s recovery proven (nodes, workload intent, hostPath and PostgreSQL data)",
    "The workload runs and its output passes semantic acceptance",
)

RECOGNIZED = ("job", "nvml", "visible_devices", "every_gpu_used", "gpus_released")
CONFINED = ("device_cgroup", "cgroup_cpus", "cgroup_memory", "oom_confined")
STORAGE = ("job_root", "models_read_only", "failed_job_leaves_nothing", "model_marker")


@dataclass(frozen=True)
class Layers:
    """Which other layers this stack builds and what they proved in this run."""

    refused: dict[str, str] = field(default_factory=dict)
    storage: bool = False
    accounting: bool = False
    #: the web layer's verification passed (it runs before acceptance), None without the layer
    web: Optional[str] = None
    k3s: bool = False
    #: the workload layer runs after this report and fills its row (workload_row)
    workload: bool = False


def _row(i: int, status: str, layer: str, evidence: list[str]) -> dict[str, Any]:
    return {"id": i, "title": TITLES[i - 1], "status": status, "layer": layer, "evidence": evidence}


def _by_checks(nodes: dict[str, dict], names: tuple[str, ...]) -> tuple[bool, list[str]]:
    ok, evidence = bool(nodes), []
    for node, r in nodes.items():
        for c in r["checks"]:
            if c["name"] in names:
                ok = ok and c["passed"]
                evidence.append(f"{node} {c['name']}: {'passed' if c['passed'] else 'FAILED'}: {c['seen']}")
    return ok, evidence


def criteria(nodes: dict[str, dict], fleet_job: Optional[dict], layers: Layers) -> list[dict[str, Any]]:
    """The seven rows. `nodes`: node -> {passed, checks} for every admitted node judged."""
    rows = []
    ok, ev = _by_checks(nodes, RECOGNIZED)
    for n, why in layers.refused.items():
        ok = False
        ev.insert(0, f"{n} not admitted: {why}")
    if fleet_job is not None:
        ok = ok and fleet_job["passed"]
        ev += [f"all-node job {fleet_job.get('job_id')}: {c['name']}: {c['seen']}" for c in fleet_job["checks"]]
    else:
        ok = False
        ev.append("no all-node job ran")
    rows.append(_row(1, "met" if ok else "failed", "acceptance", ev))
    ok, ev = _by_checks(nodes, CONFINED)
    rows.append(_row(2, "met" if ok else "failed", "acceptance (Slurm layer's cgroup.conf)", ev))
    ok, ev = _by_checks(nodes, STORAGE)
    if layers.storage:
        rows.append(_row(3, "met" if ok else "failed", "acceptance (storage layer's mounts)", ev))
    else:
        rows.append(_row(3, "not in this stack", "storage",
                         ["no storage layer: the job root is node-local and no model store is mounted", *ev]))
    if layers.accounting and fleet_job is not None:
        tres = [c for c in fleet_job["checks"] if c["name"] == "accounted_tres"]
        rows.append(_row(4, "met" if tres and tres[0]["passed"] else "failed", "accounting",
                         [f"sacct AllocTRES of job {fleet_job.get('job_id')}: {fleet_job.get('alloc_tres')}"]))
    elif layers.accounting:
        rows.append(_row(4, "failed", "accounting", ["no all-node job ran to be accounted"]))
    else:
        rows.append(_row(4, "not in this stack", "accounting", ["no accounting layer"]))
    rows.append(_row(5, "met", "web", [layers.web]) if layers.web is not None
                else _row(5, "not in this stack", "web", ["no web layer"]))
    rows.append(_row(6, "not proven by up", "k3s_retirement",
                     ["nodes handed over with a sealed bundle; recovery is proven by `pulumi destroy` "
                      "(the K3s lab tests), not by an up"]) if layers.k3s
                else _row(6, "not in this stack", "k3s_retirement", ["no K3s retirement layer"]))
    rows.append(_row(7, "after this report", "workload",
                     ["the workload runs on the fleet this report accepts; its run fills this row (its jobs, "
                      "gates, release hashes and contact sheet) and the stack output `workload`"]) if layers.workload
                else _row(7, "not in this stack", "workload", ["no workload layer"]))
    return rows


def workload_row(run: dict[str, Any]) -> dict[str, Any]:
    """Row 7 from what the workload's run read back (its stack output `workload`, or its failure):
    the jobs as Slurm recorded them, the gates' verification, the release's hashes, the contact sheet."""
    jobs = run.get("jobs") or {}
    release = run.get("release") or {}
    ok = bool(run.get("passed")) and bool(release)
    ev = [f"job {step} {j.get('id')}: {j.get('state')} {j.get('exit_code')}" for step, j in jobs.items()]
    if release:
        ev += [f"published {release.get('dir')} (final.mp4 sha256 {release.get('film_sha256')})",
               f"verification: {release.get('dir')}/verification.json",
               *(f"release.sha256: {line}" for line in release.get("release_sha256") or ())]
    else:
        ev.append(f"nothing published: {run.get('why') or 'no release'}")
    failed = sorted(n for n, g in (run.get("gates") or {}).items() if not g.get("passed"))
    ev.append(f"gates failed: {', '.join(failed)}" if failed
              else f"{len(run.get('gates') or {})} gates passed" if run.get("gates") else "no gate ran")
    if run.get("contact_sheet"):
        ev.append(f"contact sheet of the joins: {run['contact_sheet']}")
    return _row(7, "met" if ok and not failed else "failed", "workload", ev)
