"""The GPU baseline verdict: every node's probe document against the stack's expectations.

Pure: no host is contacted here. `onhost/probe.py` produces one JSON
document per node; `judge_stack` (or `judge_fleet` with explicit
expectations) returns a `FleetVerdict` with one `NodeVerdict` per GPU node:

- `ok`: the node matches the baseline and may join Slurm;
- `failed`: the node is kept out; `reasons` says exactly why, each reason
  naming the node and the values ("node gpu03 reports 7 GPUs, the stack
  declares 8");
- `pending`: an `unreachable` node: not probed, never joined from stale
  inventory, whatever probe text is lying around for it.

Fail closed: a missing, unreadable or partial probe document, an NVML error
code, or any text NVML printed (stdout or stderr) fails the node. Fleet-wide
checks (a GPU UUID on two nodes, drivers that differ between nodes) add
`problems` and fail every node involved. GPU counts come from the NVML count
field and the device records, never from splitting text.

Where the node has a CUDA toolkit, the probe's CUDA runtime program must
compile, run cleanly (exit 0, no CUDA error, nothing on stderr) and see as many
devices as NVML and the stack; a node without a toolkit is recorded, not failed
(the toolkit is not part of the baseline, only what it shows when present).

The verdict types are verdicts.py; CUDA and NVML version numbers, versions.py.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from typing import Any, Iterable, Mapping, Optional, Union

from ...config.fleet import FleetConfig
from .verdicts import FleetVerdict, GpuExpectation, NodeVerdict
from .versions import cuda_version_number, cuda_version_text, nvml_library_driver

PROBE_SCHEMA = "gpu-fleet/gpu-probe/1"
ProbeDoc = Union[None, str, bytes, Mapping[str, Any]]

_TEXT_IN_REASON = 300  # characters of captured NVML text quoted in a reason


# ---- expectations from the stack ---------------------------------------------------------

def expectations(cfg: FleetConfig, nodes: Optional[Iterable[str]] = None, *,
                 required_cgroup_controllers: Iterable[str] = (),
                 require_ntp: bool = False) -> dict[str, GpuExpectation]:
    """Expectations of the reachable GPU nodes (optionally only `nodes`), in stack order."""
    wanted = None if nodes is None else set(nodes)
    controllers = tuple(required_cgroup_controllers)
    return {
        n.name: GpuExpectation.for_node(n, cfg.gpu_runtime,
                                        required_cgroup_controllers=controllers,
                                        require_ntp=require_ntp)
        for n in cfg.nodes
        if n.gpus is not None and n.owner != "unreachable"
        and (wanted is None or n.name in wanted)
    }


def pending_nodes(cfg: FleetConfig) -> list[str]:
    """GPU nodes the stack marks unreachable: they stay pending and are never probed."""
    return [n.name for n in cfg.nodes if n.gpus is not None and n.owner == "unreachable"]


def _quote(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > _TEXT_IN_REASON:
        text = text[:_TEXT_IN_REASON] + " ..."
    return json.dumps(text, ensure_ascii=False)


def _indices(idx: list[Optional[int]]) -> str:
    return ("GPU " if len(idx) == 1 else "GPUs ") + ", ".join(str(i) for i in idx)


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _judge_cuda_runtime(name: str, exp: GpuExpectation, cr: Mapping[str, Any],
                        nvml_count: Optional[int]) -> list[str]:
    """Reasons from the CUDA runtime probe of a node that has a toolkit."""
    reasons: list[str] = []
    add = reasons.append
    if not cr.get("compiled"):
        why = cr.get("compile_error") or f"{cr.get('nvcc')} exited {cr.get('compile_exit_code')}"
        add(f"node {name}: the CUDA toolkit {cr.get('toolkit')} cannot compile the runtime "
            f"probe ({why}): {_quote(cr.get('compile_output') or '')}")
        return reasons
    stderr = cr.get("stderr") or ""
    if not cr.get("ran"):
        add(f"node {name}: the CUDA runtime probe did not run: {cr.get('run_error')}")
    elif cr.get("exit_code") != 0:
        add(f"node {name}: the CUDA runtime probe exited {cr.get('exit_code')}"
            + (f": {_quote(stderr)}" if stderr.strip() else ""))
    elif stderr.strip():
        add(f"node {name}: the CUDA runtime probe printed on stderr: {_quote(stderr)}")
    runtime, driver = _int(cr.get("runtime_version")), _int(cr.get("driver_version"))
    for err in cr.get("errors") or []:
        where = f"node {name}" if err.get("index") is None else f"node {name} GPU {err['index']}"
        text = f"{where}: CUDA {err.get('call')} failed with error {err.get('code')}: " \
               f"{err.get('text')}"
        if err.get("code") == 35 and runtime:  # cudaErrorInsufficientDriver
            text += (f" (runtime {cuda_version_text(runtime)}, the driver supports "
                     f"{cuda_version_text(driver) if driver else 'none'})")
        add(text)
    other = "\n".join(cr.get("stdout_other") or [])
    if other:
        add(f"node {name}: the CUDA runtime probe printed unexpected text: {_quote(other)}")
    n = _int(cr.get("device_count"))
    if n is None:
        if cr.get("ran") and cr.get("exit_code") == 0 and not cr.get("errors"):
            add(f"node {name}: the CUDA runtime probe reported no device count")
        return reasons
    others = ([f"NVML {nvml_count}"] if nvml_count is not None and n != nvml_count else []) \
        + ([f"the stack declares {exp.gpu_count}"] if n != exp.gpu_count else [])
    if others:
        add(f"node {name}: CUDA runtime probe sees {n} device{'s' if n != 1 else ''}, "
            + ", ".join(others))
    return reasons


# ---- one node ----------------------------------------------------------------------------

def _load(doc: ProbeDoc) -> tuple[Optional[dict], Optional[str]]:
    if doc is None:
        return None, "no probe output (the probe did not run or printed nothing)"
    if isinstance(doc, (str, bytes)):
        text = doc.decode("utf-8", "replace") if isinstance(doc, bytes) else doc
        if not text.strip():
            return None, "no probe output (the probe printed nothing)"
        try:
            doc = json.loads(text)
        except ValueError as e:
            return None, f"the probe output is not one JSON document ({e}): {_quote(text)}"
    if not isinstance(doc, Mapping):
        return None, f"the probe output is a {type(doc).__name__}, not a JSON object"
    if doc.get("schema") != PROBE_SCHEMA:
        return None, (f"the probe output has schema {doc.get('schema')!r}, "
                      f"expected {PROBE_SCHEMA!r}")
    return dict(doc), None


def judge_node(exp: GpuExpectation, doc: ProbeDoc) -> NodeVerdict:
    """The verdict on one node's probe document (str, bytes, dict or None)."""
    name = exp.node
    data, problem = _load(doc)
    if data is None:
        return NodeVerdict(node=name, status="failed", reasons=(f"node {name}: {problem}",))

    reasons: list[str] = []
    add = reasons.append

    for err in data.get("probe_errors") or []:
        last = (err.get("text") or "").strip().splitlines()[-1:] or ["?"]
        add(f"node {name}: the probe failed at step {err.get('step')}: {last[0]}")

    pynvml = data.get("pynvml") or {}
    if not pynvml.get("importable"):
        add(f"node {name}: pynvml is not importable ({pynvml.get('error') or 'not probed'}); "
            "install nvidia-ml-py on the node")

    for err in data.get("nvml_errors") or []:
        where = f"node {name}" if err.get("index") is None else f"node {name} GPU {err['index']}"
        code = f"{err.get('name')} ({err.get('code')})" if err.get("code") is not None \
            else str(err.get("name"))
        add(f"{where}: NVML {err.get('call')} failed: {code}: {err.get('text')}")

    for out in data.get("nvml_output") or []:
        where = f"node {name}" if out.get("index") is None else f"node {name} GPU {out['index']}"
        add(f"{where}: NVML printed on {out.get('stream')} during {out.get('call')}: "
            f"{_quote(out.get('text') or '')}")

    # ---- devices: counted by fields ---------------------------------------------------
    gpus = [g for g in data.get("gpus") or [] if isinstance(g, Mapping)]
    count = data.get("gpu_count")
    if isinstance(count, bool) or not isinstance(count, int):
        count = None
        if pynvml.get("importable") and not data.get("nvml_errors"):
            add(f"node {name}: the probe reported no GPU count")
    else:
        if count != exp.gpu_count:
            add(f"node {name} reports {count} GPU{'s' if count != 1 else ''}, "
                f"the stack declares {exp.gpu_count}")
        if len(gpus) != count:
            add(f"node {name}: NVML counts {count} GPUs but the probe listed {len(gpus)}")

    wrong_model: dict[str, list[Optional[int]]] = defaultdict(list)  # a GPU's index as probed
    seen_uuid: dict[str, Optional[int]] = {}
    for g in gpus:
        i = g.get("index")
        model, uuid = g.get("name"), g.get("uuid")
        if model is not None and model != exp.gpu_model:
            wrong_model[model].append(i)
        if uuid is not None:
            if uuid in seen_uuid:
                add(f"node {name} GPUs {seen_uuid[uuid]} and {i} report the same UUID {uuid}")
            seen_uuid.setdefault(uuid, i)
        ecc = g.get("ecc_uncorrected")
        if isinstance(ecc, int) and ecc > 0:
            add(f"node {name} GPU {i} ({uuid}) has {ecc} uncorrected ECC "
                f"error{'s' if ecc != 1 else ''} (volatile count), the baseline is 0")
    for model, idx in wrong_model.items():
        add(f"node {name} {_indices(idx)} {'is' if len(idx) == 1 else 'are'} {model!r}, "
            f"the stack declares {exp.gpu_model!r}")

    # ---- driver, NVML library, kernel module -----------------------------------------
    driver = data.get("driver_version")
    nvml_version = data.get("nvml_version")
    library = nvml_library_driver(nvml_version)
    user_space = driver or library
    if user_space and user_space != exp.driver_version:
        src = "" if driver else f" (NVML library {nvml_version})"
        add(f"node {name} runs driver {user_space}{src}, the baseline is {exp.driver_version}")
    if driver and library and driver != library:
        add(f"node {name}: NVML reports driver {driver} but the NVML library is "
            f"{nvml_version} (driver {library})")

    km = data.get("kernel_module") or {}
    kmod = km.get("version")
    if not km.get("loaded"):
        add(f"node {name}: the nvidia kernel module is not loaded"
            + (f" ({km['error']})" if km.get("error") else ""))
    if kmod is None:
        add(f"node {name}: cannot tell the loaded nvidia kernel module version"
            + (f" ({km['error']})" if km.get("error") else ""))
    else:
        user_views = [v for v in (driver, library) if v]
        if any(v != kmod for v in user_views):
            shown = f"driver {driver}" if driver else ""
            if library and library != driver:
                shown += (", " if shown else "") + f"NVML library {nvml_version}"
            add(f"node {name}: driver/kernel module mismatch: user space has {shown}, "
                f"the loaded kernel module is {kmod} ({km.get('version_source')})")
        elif not user_views and kmod != exp.driver_version:
            add(f"node {name} loads nvidia kernel module {kmod}, the baseline is "
                f"{exp.driver_version}")

    # ---- CUDA --------------------------------------------------------------------------
    cuda = data.get("cuda_driver_version")
    if isinstance(cuda, bool) or not isinstance(cuda, int):
        cuda = None
        if driver is not None:
            add(f"node {name}: NVML reported no CUDA driver version")
    else:
        need = cuda_version_number(exp.cuda_runtime)
        if cuda < need:
            add(f"node {name} CUDA driver {cuda_version_text(cuda)} ({cuda}) cannot run the "
                f"stack's CUDA runtime {exp.cuda_runtime} (needs {cuda_version_text(need)} "
                "or newer)")

    # ---- cgroup, NTP -------------------------------------------------------------------
    cg = data.get("cgroup") or {}
    if exp.required_cgroup_controllers:
        have = cg.get("controllers")
        if have is None:
            add(f"node {name} has no cgroup v2 controllers to check ({cg.get('error')}); "
                f"needs {' '.join(exp.required_cgroup_controllers)}")
        else:
            missing = [c for c in exp.required_cgroup_controllers if c not in have]
            if missing:
                add(f"node {name} lacks cgroup v2 controllers {' '.join(missing)} "
                    f"(has: {' '.join(have) or 'none'})")
    if exp.require_ntp and data.get("ntp_synchronized") is not True:
        state = {False: "not NTP-synchronized", None: "of unknown NTP state"}[
            data.get("ntp_synchronized")]
        add(f"node {name}: the clock is {state}"
            + (f" ({data['ntp_error']})" if data.get("ntp_error") else ""))

    # ---- the CUDA runtime probe: judged where a toolkit was found -----------------------
    cr = data.get("cuda_runtime")
    cr = cr if isinstance(cr, Mapping) else {}
    if cr.get("toolkit") or cr.get("ran"):
        reasons += _judge_cuda_runtime(name, exp, cr, count)
    sm70 = cr.get("sm70") if isinstance(cr.get("sm70"), bool) else None

    ccs = [c for c in (g.get("compute_capability") for g in gpus) if isinstance(c, list) and len(c) == 2]
    cc_text = tuple(f"{c[0]}.{c[1]}" for c in ccs)
    bf16 = None
    if gpus and len(ccs) == len(gpus):
        bf16 = all(c[0] >= 8 for c in ccs)

    return NodeVerdict(
        node=name, status="failed" if reasons else "ok", reasons=tuple(reasons),
        gpu_count=count,
        uuids=tuple(g["uuid"] for g in gpus if g.get("uuid")),
        models=tuple(g["name"] for g in gpus if g.get("name")),
        driver_version=driver, nvml_version=nvml_version, kernel_module_version=kmod,
        cuda_driver_version=cuda, compute_capability=cc_text, bf16=bf16,
        cuda_toolkit=cr.get("toolkit") or None, cuda_runtime_version=_int(cr.get("runtime_version")),
        cuda_device_count=_int(cr.get("device_count")), sm70=sm70,
    )


# ---- the fleet ---------------------------------------------------------------------------

def _fail(v: NodeVerdict, reason: str) -> NodeVerdict:
    return dataclasses.replace(v, status="failed", reasons=v.reasons + (reason,))


def judge_fleet(expected: Mapping[str, GpuExpectation], probes: Mapping[str, ProbeDoc],
                pending: Iterable[str] = ()) -> FleetVerdict:
    """Judge every expected node, then the fleet-wide rules; `pending` nodes are not judged."""
    pending = [p for p in pending if p not in expected]
    verdicts = {n: judge_node(exp, probes.get(n)) for n, exp in expected.items()}
    problems: list[str] = []

    # UUIDs unique across the fleet
    owners: dict[str, list[tuple[str, Optional[int]]]] = defaultdict(list)
    for n in verdicts:
        data, _ = _load(probes.get(n))
        for g in (data or {}).get("gpus") or []:
            if isinstance(g, Mapping) and g.get("uuid"):
                owners[g["uuid"]].append((n, g.get("index")))
    for uuid, where in owners.items():
        nodes = list(dict.fromkeys(n for n, _ in where))
        if len(nodes) < 2:
            continue
        places = [f"{n} (GPU {i})" for n, i in where]
        problems.append(f"GPU UUID {uuid} is reported by "
                        f"{'both ' if len(places) == 2 else ''}{_and(places)}")
        for n in nodes:
            others = [p for (m, _), p in zip(where, places) if m != n]
            mine = ", ".join(str(i) for m, i in where if m == n)
            verdicts[n] = _fail(verdicts[n], f"node {n} GPU {mine} UUID {uuid} is also "
                                             f"reported by {_and(others)}")

    # driver, kernel module and CUDA driver uniform across the fleet
    for label, key in (("driver versions", "driver_version"),
                       ("nvidia kernel module versions", "kernel_module_version"),
                       ("CUDA driver versions", "cuda_driver_version")):
        groups: dict[Any, list[str]] = defaultdict(list)
        for n, v in verdicts.items():
            value = getattr(v, key)
            if value is not None:
                groups[value].append(n)
        if len(groups) > 1:
            ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), str(kv[0])))
            problems.append(f"{label} differ across the fleet: " + "; ".join(
                f"{value} on {', '.join(nodes)}" for value, nodes in ordered))
            majority = ordered[0][0] if len(ordered[0][1]) > len(ordered[1][1]) else None
            for value, nodes in ordered:
                if value == majority:
                    continue
                for n in nodes:
                    if verdicts[n].ok:  # a node off the fleet's version fails even when its
                        verdicts[n] = _fail(verdicts[n], (  # own checks could not tell
                            f"node {n} has {label[:-1]} {value}, unlike the rest of the fleet"))

    for n in pending:
        verdicts[n] = NodeVerdict(node=n, status="pending", reasons=(
            f"node {n} is unreachable and stays pending: it is not probed and never joins "
            "Slurm from stale inventory",))
    ignored = tuple(sorted(set(probes) - set(expected) - set(pending)))
    return FleetVerdict(nodes=verdicts, problems=tuple(problems), ignored=ignored)


def judge_stack(cfg: FleetConfig, probes: Mapping[str, ProbeDoc],
                nodes: Optional[Iterable[str]] = None, **expectation_options: Any) -> FleetVerdict:
    """The stack's GPU baseline over `probes` (node name -> probe output)."""
    wanted = None if nodes is None else set(nodes)
    return judge_fleet(expectations(cfg, wanted, **expectation_options), probes,
                       pending=[n for n in pending_nodes(cfg) if wanted is None or n in wanted])
