"""The GPU runtime layer: the pinned NVML bindings on every GPU node and the fleet's GPU baseline.

Before Slurm takes a node, the node proves a uniform GPU runtime (the seed's GPU
baseline; docs/gpu-probe.md). `GpuRuntime` declares, for the stack's GPU nodes:

- per reachable node a `Payload` (its SHA-256 in the stack, not its bytes) with the project's
  pinned pynvml (the single-file
  `pynvml.py` of nvidia-ml-py from the project's virtualenv; Debian has no
  python3-pynvml) in `pynvml_dir`, /opt/gpu-fleet/lib by default;
- one fleet-level `GpuBaseline` dynamic resource that runs the probe
  (onhost/probe.py, as `python3 -` with the script on stdin) on every
  node in parallel, one SSH round trip per node, and judges the documents with
  baseline.py.

The pinned bindings are pynvml_pin.py; what the probes returned, judged into the
baseline's outputs, probe_runs.py.

Outputs: `healthy_nodes` (stack order) for the Slurm layer, `verdicts` (per node:
verdict, reasons, count, UUIDs, driver, kernel module, CUDA, BF16, the CUDA runtime
probe) and fleet-wide `problems`.

When it probes. Probing is read-only, so it runs on create/update AND on
`read`: `pulumi refresh` (or `up --refresh`) re-probes every node and records the
new verdicts in the state; the next `up` hands them to the Slurm layer. `diff`
never touches a host: the baseline re-runs on `up` only when its inputs change
(the expectations, the node list or their addresses, the probe script, the
pinned pynvml, `probe_paths`, or `triggers`), so a second `up` with nothing
changed sends no command at all.

Fail closed, without failing the rollout for one node: a node that fails the
baseline is `failed` with reasons naming the node and the mismatch, and is left
out of `healthy_nodes` (the caller keeps it out of Slurm); the deployment goes
on. It fails only on transport errors (a declared-reachable node that SSH
cannot reach, a host key mismatch, a refused key, sudo wanting a password) and
when not one node could be probed at all, each message naming the host. A probe
that ran but printed no document (no python3, a hung NVML call killed by the
timeout) fails that node only. `unreachable` nodes are `pending`: never
probed, never healthy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from ...admission import Gate
from ...site import Site
from .config import GpuRuntimeLayer
from ...errors import FleetError
from .probe_source import probe_source
from .probe_runs import UNKNOWN, ProbeRun, baseline_outputs, fleet_verdict, not_known_yet
from .pynvml_pin import pinned_pynvml
from ...providers.parts import Props, _entry
from ...providers.payload import Payload
from ...transport import (
    AuthFailed, Connection, FanOutError, HostError, HostKeyMismatch, HostUnreachable, SshTarget,
    SudoPasswordRequired, fan_out,
)

DEFAULT_PROBE_TIMEOUT_S = 120

#: probe_paths keys -> the probe's arguments; omitted keys keep the probe's defaults, which
#: are a real node's paths (/proc/driver/nvidia/version, /sys/module, /proc/modules,
#: /sys/fs/cgroup/cgroup.controllers). Only a test double (the lab) points them elsewhere.
PROBE_PATH_ARGS = {
    "nvidia_version_file": "--nvidia-version-file",
    "sys_module_dir": "--sys-module-dir",
    "proc_modules": "--proc-modules",
    "cgroup_controllers": "--cgroup-controllers",
}

#: errors of the way to a host, not of the node's GPUs: they fail the deployment
TRANSPORT_ERRORS = (HostUnreachable, HostKeyMismatch, AuthFailed, SudoPasswordRequired)

#: the GpuBaseline inputs; a change in any of them re-runs the probes on `up`
INPUT_KEYS = ("nodes", "pending", "driver_version", "cuda_runtime", "required_cgroup_controllers",
              "require_ntp", "probe_paths", "pynvml_dir", "pynvml_version", "pynvml_sha256",
              "probe_sha256", "probe_timeout_s", "max_parallel", "triggers")
OUTPUT_KEYS = ("verdicts", "healthy_nodes", "failed_nodes", "pending_nodes", "unknown_nodes", "problems",
               "summary")


# ---- probing -------------------------------------------------------------------------------

def probe_args(paths: Optional[Mapping[str, str]]) -> list[str]:
    """`probe_paths` as the probe's command-line arguments (stable order)."""
    out: list[str] = []
    for key, value in sorted((paths or {}).items()):
        if key not in PROBE_PATH_ARGS:
            raise FleetError(f"probe_paths.{key}: unknown; expected one of "
                             f"{', '.join(sorted(PROBE_PATH_ARGS))}")
        if not isinstance(value, str) or not value.startswith("/"):
            raise FleetError(f"probe_paths.{key}: {value!r} is not an absolute path")
        out += [PROBE_PATH_ARGS[key], value]
    return out


def probe_command(props: Props) -> list[str]:
    """The node-side command; the probe's source goes on stdin. Read-only: no bytecode written;
    `timeout` kills a hung NVML call on the node itself."""
    return ["timeout", "-k", "5", str(int(props["probe_timeout_s"])), "env",
            f"PYTHONPATH={props['pynvml_dir']}", "PYTHONDONTWRITEBYTECODE=1",
            "python3", "-", *probe_args(props.get("probe_paths"))]


def _tail(text: str, n: int = 600) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else "... " + text[-n:]


def probe_node(conn: Connection, props: Props) -> ProbeRun:
    """One SSH round trip. Transport errors propagate; a probe that ran and failed is a result."""
    name = conn.t.name
    conn.connect()
    timeout = int(props["probe_timeout_s"])
    try:
        res = conn.run(probe_command(props), mutating=False, stdin=probe_source().encode(),
                       timeout=timeout + 30)
    except TRANSPORT_ERRORS:
        raise
    except HostError as e:
        if e.rc in (124, 137):
            why = f"the probe did not finish within {timeout} s (a hung NVML call?)"
        elif e.rc == 127:
            why = "python3 (or timeout/env) is missing on the node"
        else:
            why = f"the probe exited {e.rc if e.rc is not None else 'without an exit code'}"
        out = f": {_tail(e.output)}" if e.output.strip() else ""
        return ProbeRun(name, failure=f"node {name}: {why}{out}")
    if not res.stdout.strip():
        err = f" (stderr: {_tail(res.stderr)})" if res.stderr.strip() else ""
        return ProbeRun(name, failure=f"node {name}: the probe printed nothing{err}")
    return ProbeRun(name, document=res.stdout)


def inputs_of(props: Props) -> Props:
    return {k: props.get(k) for k in INPUT_KEYS}


class GpuBaselineProvider(ResourceProvider):
    """Probes every node (read-only) on create, update and read; diff only compares inputs."""

    serialize_as_secret_always = False  # no secret captured (components/providers/base.py)

    def run(self, props: Props, refresh: bool = False) -> Props:
        nodes = props["nodes"]
        runs: dict[str, ProbeRun] = {}
        if nodes:
            targets = []
            for n in nodes:
                t = SshTarget.from_dict(n["conn"])
                if t.name != n["name"]:
                    t = dataclasses.replace(t, name=n["name"])
                targets.append(t)
            try:
                runs = fan_out(targets, lambda c: probe_node(c, props),
                               max_parallel=int(props.get("max_parallel") or 16))
            except FanOutError as e:
                raise FleetError(f"GPU baseline: cannot probe {len(e.failures)} node(s) over SSH "
                                 f"(a transport error, not a GPU verdict):\n{e}") from None
            if not any(r.document is not None for r in runs.values()):
                raise FleetError("GPU baseline: not one node could be probed:\n"
                                 + "\n".join(f"  - {runs[n['name']].failure}" for n in nodes))
        fv = fleet_verdict(props, runs)
        if refresh:
            fv = not_known_yet(props, runs, fv)
        return {**inputs_of(props), **baseline_outputs(fv)}

    @_entry
    def create(self, props: Props) -> CreateResult:
        return CreateResult(id_="gpu-baseline", outs=self.run(props))

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        return UpdateResult(outs=self.run(news))

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        changed = [k for k in INPUT_KEYS if olds.get(k) != news.get(k)]
        if any((v or {}).get("verdict") == UNKNOWN for v in (olds.get("verdicts") or {}).values()):
            changed.append("verdicts")  # a refresh found a prerequisite missing: probe again
        return DiffResult(changes=bool(changed), replaces=[], stables=[],
                          delete_before_replace=False)

    @_entry
    def read(self, id_: str, props: Props) -> ReadResult:
        return ReadResult(id_=id_, outs=self.run(props, refresh=True))

    def delete(self, _id: str, props: Props) -> None:
        return None  # probing changed nothing on the nodes


class GpuBaseline(Resource, module="gpu", name="GpuBaseline"):
    """The fleet's GPU baseline: one probe per node, the verdicts, the healthy nodes."""

    verdicts: pulumi.Output[dict]
    healthy_nodes: pulumi.Output[list]
    failed_nodes: pulumi.Output[list]
    pending_nodes: pulumi.Output[list]
    problems: pulumi.Output[list]
    summary: pulumi.Output[str]

    def __init__(self, name: str, *, nodes: list[dict], pending: list[str], driver_version: str,
                 cuda_runtime: str, pynvml_dir: str, pynvml_version: str, pynvml_sha256: str,
                 probe_paths: Optional[Mapping[str, str]] = None,
                 required_cgroup_controllers: Sequence[str] = (), require_ntp: bool = False,
                 probe_timeout_s: int = DEFAULT_PROBE_TIMEOUT_S, max_parallel: int = 16,
                 triggers: Optional[pulumi.Input[dict]] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        props: dict[str, Any] = {
            "nodes": nodes, "pending": list(pending), "driver_version": driver_version,
            "cuda_runtime": cuda_runtime, "required_cgroup_controllers": list(required_cgroup_controllers),
            "require_ntp": require_ntp, "probe_paths": dict(probe_paths or {}),
            "pynvml_dir": pynvml_dir, "pynvml_version": pynvml_version,
            "pynvml_sha256": pynvml_sha256, "probe_sha256": hashlib.sha256(probe_source().encode()).hexdigest(),
            "probe_timeout_s": probe_timeout_s, "max_parallel": max_parallel,
            "triggers": triggers or {},
        }
        props.update({k: None for k in OUTPUT_KEYS})
        super().__init__(GpuBaselineProvider(), name, props, opts)


# ---- the component -------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class GpuRuntimeInputs:
    site: Site
    gpu_runtime: GpuRuntimeLayer
    #: anything whose change must re-run the probes on `up`
    triggers: Optional[pulumi.Input[dict]] = None
    #: node -> what must be in place before the layer writes to it (a retired K3s node's stop)
    node_after: Mapping[str, Sequence[pulumi.Resource]] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuRuntimeOutputs:
    healthy_nodes: pulumi.Output[list]
    verdicts: pulumi.Output[dict]
    problems: pulumi.Output[list]
    #: the GPU baseline as an admission gate: it judges every reachable GPU node
    gate: Gate

    def exports(self) -> dict[str, pulumi.Input]:
        return {"gpu": pulumi.Output.all(self.healthy_nodes, self.verdicts, self.problems).apply(
            lambda t: {"healthyNodes": t[0], "verdicts": t[1], "problems": t[2]})}


def _abs_dir(path: str, what: str) -> str:
    if not path.startswith("/") or posixpath.normpath(path) != path.rstrip("/") or path == "/":
        raise FleetError(f"{what}: {path!r} is not a normalized absolute directory")
    return path.rstrip("/")


class GpuRuntime(pulumi.ComponentResource):
    """The pinned pynvml on every reachable GPU node and the fleet's GPU baseline verdicts."""

    healthy_nodes: pulumi.Output[list]
    verdicts: pulumi.Output[dict]
    problems: pulumi.Output[list]

    def __init__(self, name: str, inputs: GpuRuntimeInputs, opts: Optional[pulumi.ResourceOptions] = None):
        """Every GPU node of the site; `unreachable` ones are pending (no file, no probe).
        `probe_paths` overrides the probe's kernel-fact paths (only the lab's test double)."""
        super().__init__("gpu-fleet:gpu:GpuRuntime", name, None, opts)
        site, layer, node_after = inputs.site, inputs.gpu_runtime, inputs.node_after
        probe_paths = {k: v for k, v in layer.probe_paths.model_dump().items() if v is not None}
        nodes = [(n, site.conn(n)) for n in site.nodes if n.gpus]
        pynvml_dir = _abs_dir(layer.pynvml_dir, "pynvml_dir")
        probe_args(probe_paths)  # reject bad paths before any resource is declared
        pinned = pinned_pynvml()
        gpu_nodes = [(n, c) for n, c in nodes if n.gpus is not None]
        reachable = [(n, c) for n, c in gpu_nodes if n.owner != "unreachable"]
        self.pending = [n.name for n, _ in gpu_nodes if n.owner == "unreachable"]
        self.pynvml = {"version": pinned.version, "sha256": pinned.sha256,
                       "path": f"{pynvml_dir}/pynvml.py"}

        self.files: list[Payload] = []
        for n, conn in reachable:
            if conn.get("name") != n.name:
                raise FleetError(f"GpuRuntime: the connection for node {n.name} names "
                                 f"{conn.get('name')!r}")
            # a Payload: the stack records the module's SHA-256, not its 332 KB per node; the
            # alias takes over what earlier releases recorded as a File (same path and bytes)
            self.files.append(Payload(
                f"{name}-{n.name}-pynvml", conn=conn, path=self.pynvml["path"], source=pinned.path,
                mode="0644", owner="root", group="root", bytecode=True,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list((node_after or {}).get(n.name, ())), aliases=[
                    pulumi.Alias(type_="pulumi-python:dynamic/host:File")])))

        self.baseline = GpuBaseline(
            f"{name}-baseline",
            nodes=[{"name": n.name, "conn": conn, "gpu_count": g.count, "gpu_model": g.model}
                   for n, conn in reachable if (g := n.gpus) is not None],  # all of them: GPU nodes
            pending=self.pending, driver_version=layer.driver_version,
            cuda_runtime=layer.cuda_runtime, pynvml_dir=pynvml_dir,
            pynvml_version=pinned.version, pynvml_sha256=pinned.sha256,
            probe_paths=probe_paths, required_cgroup_controllers=layer.required_cgroup_controllers,
            require_ntp=layer.require_ntp, probe_timeout_s=layer.probe_timeout_s,
            max_parallel=site.ssh.max_parallel, triggers=inputs.triggers,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(self.files)))

        self.healthy_nodes = self.baseline.healthy_nodes
        self.verdicts = self.baseline.verdicts
        self.problems = self.baseline.problems
        self.failed_nodes = self.baseline.failed_nodes
        self.summary = self.baseline.summary

        def warn(args: list) -> None:
            verdicts, problems, healthy, summary = args
            failed = {n: v for n, v in (verdicts or {}).items() if v.get("verdict") == "failed"}
            if not failed and not problems:
                return
            lines = [f"{summary}; healthy: {', '.join(healthy or []) or 'none'}"]
            lines += [f"fleet: {p}" for p in problems or []]
            lines += [r for v in failed.values() for r in v.get("reasons") or []]
            pulumi.log.warn("\n  ".join(lines), resource=self)

        pulumi.Output.all(self.verdicts, self.problems, self.healthy_nodes, self.summary).apply(warn)
        self.outputs = GpuRuntimeOutputs(
            healthy_nodes=self.healthy_nodes, verdicts=self.verdicts, problems=self.problems,
            gate=Gate("gpu_runtime", frozenset(n.name for n, _ in reachable), self.healthy_nodes,
                      self.verdicts.apply(lambda v: {n: d.get("reasons") or []
                                                     for n, d in (v or {}).items()
                                                     if d.get("verdict") != "ok"})))
        self.register_outputs({"healthy_nodes": self.healthy_nodes, "verdicts": self.verdicts,
                               "problems": self.problems, "pynvml": self.pynvml})
