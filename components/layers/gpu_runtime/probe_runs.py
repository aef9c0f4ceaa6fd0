"""What the GPU baseline's probes returned (`ProbeRun`, one per node) judged into the fleet's
verdict and the GpuBaseline resource's outputs; a refresh that finds the layer's own pynvml
missing says `unknown`, not failed. Pure: no host is contacted; apart from component.py, whose
provider runs the probes and records these outputs."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ...providers.parts import Props
from .baseline import judge_fleet
from .verdicts import FleetVerdict, GpuExpectation


@dataclass(frozen=True)
class ProbeRun:
    node: str
    document: Optional[str] = None  # the probe's stdout when it exited 0
    failure: Optional[str] = None   # why no document: exit code and output, naming the node


def expectations(props: Props) -> dict[str, GpuExpectation]:
    return {
        n["name"]: GpuExpectation(
            node=n["name"], gpu_count=int(n["gpu_count"]), gpu_model=n["gpu_model"],
            driver_version=props["driver_version"], cuda_runtime=props["cuda_runtime"],
            required_cgroup_controllers=tuple(props.get("required_cgroup_controllers") or ()),
            require_ntp=bool(props.get("require_ntp")))
        for n in props["nodes"]
    }


def fleet_verdict(props: Props, runs: Mapping[str, ProbeRun]) -> FleetVerdict:
    """Judge what the probes returned; a node without a document fails with the reason why."""
    docs = {n: r.document for n, r in runs.items() if r.document is not None}
    fv = judge_fleet(expectations(props), docs, pending=props.get("pending") or [])
    nodes = dict(fv.nodes)
    for n, r in runs.items():
        if r.document is None and n in nodes:
            assert r.failure is not None  # probe_node: a run without a document says why
            nodes[n] = dataclasses.replace(nodes[n], status="failed", reasons=(r.failure,))
    return dataclasses.replace(fv, nodes=nodes)


#: a refresh's verdict for a node whose prerequisite the layer itself installs is missing
UNKNOWN = "unknown"


def not_known_yet(props: Props, runs: Mapping[str, ProbeRun], fv: FleetVerdict) -> FleetVerdict:
    """A refresh (read) that finds the layer's own prerequisite missing on a node (pynvml not
    importable: a node re-imaged, or this layer never applied there) says nothing about its
    GPUs: the node is `unknown`, not failed, and the next `up` probes it again once the layer
    has put pynvml back (diff sees `unknown` and updates, after the pynvml files)."""
    nodes = dict(fv.nodes)
    for n, v in fv.nodes.items():
        doc = r.document if (r := runs.get(n)) else None
        try:
            importable = (json.loads(doc).get("pynvml") or {}).get("importable") if doc else None
        except ValueError:
            importable = None
        if v.status == "failed" and importable is False:
            nodes[n] = dataclasses.replace(v, status=UNKNOWN, reasons=(
                f"node {n}: not known yet: pynvml is not installed in {props['pynvml_dir']}; probed "
                "again once this layer has put it back",))
    return dataclasses.replace(fv, nodes=nodes)


def baseline_outputs(fv: FleetVerdict) -> dict[str, Any]:
    summary = fv.report().splitlines()[0]
    return {
        "verdicts": {n: v.output() for n, v in fv.nodes.items()},
        "healthy_nodes": fv.passed,
        "failed_nodes": fv.failed,
        "pending_nodes": fv.pending,
        "unknown_nodes": fv.names(UNKNOWN),
        "problems": list(fv.problems),
        "summary": summary,
    }
