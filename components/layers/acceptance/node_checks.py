"""What one node's acceptance job printed, and the verdict on it (pure).

The job (scripts/node_job.sh) prints `<step kind>.<key>=<value>` lines; `parse_node` turns
them into a dict and `judge_node` into checks, each with what was seen, so the stack output
and the report say what proved the node and, for a failed one, why it was drained. What is
proven comes from inside the job: NVML's GPUs against the GPU layer's record, the devices a
single-GPU step may open (the device cgroup answers EPERM for the others), the cpuset and
memory limit of the job's cgroup as the kernel holds them, a step past its memory ending out
of memory, a write into the read-only model store refused with EROFS, and a failed step's
files gone from the job root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from ..slurm.render import count_visible_gpus

#: device open results that mean the device cgroup let the step in (a real GPU opens; the lab's
#: driverless device files answer ENXIO); EPERM is the cgroup's refusal
ALLOWED = frozenset({"open", "ENXIO", "ENODEV"})
DENIED = "EPERM"
#: the prefix of a drain reason this layer sets, and the only one it lifts
DRAIN_PREFIX = "gpu-fleet acceptance:"
MIB = 1 << 20


@dataclass(frozen=True)
class NodeExpect:
    """What the stack and the GPU layer's record say the node has."""

    name: str
    gpus: int
    gpu_type: str = ""
    model: str = ""
    #: UUIDs the GPU layer recorded, by index (empty without the GPU layer)
    uuids: tuple[str, ...] = ()
    cpus: int = 1
    mem_mib: int = 256
    nvml: bool = False
    marker: bool = False
    readonly: bool = False
    #: the stack's node deep checks (name, command, figure, min_figure, ...)
    deep: tuple[dict, ...] = ()


def check(name: str, passed: bool, seen: str) -> dict[str, Any]:
    return {"name": name, "passed": bool(passed), "seen": seen}


def parse_blocks(stdout: str) -> tuple[dict[str, list[str]], dict[str, str], Optional[str]]:
    """fleet_jobs.sh's output -> (node -> its job's lines, node -> GresUsed, the 'not ready' view)."""
    blocks: dict[str, list[str]] = {}
    gres: dict[str, str] = {}
    current: Optional[list[str]] = None
    not_ready: Optional[list[str]] = None
    for line in stdout.splitlines():
        if line.startswith("== "):
            name = line[3:].strip()
            current = [] if name == "not ready" else blocks.setdefault(name, [])
            if name == "not ready":
                not_ready = current
        elif line.startswith("gres_used="):
            node, _, used = line[len("gres_used="):].partition(" ")
            gres[node] = used.strip()
            current = None
        elif current is not None:
            current.append(line)
    return blocks, gres, ("\n".join(not_ready) if not_ready is not None else None)


def parse_node(lines: list[str]) -> dict[str, Any]:
    """One node's job output -> {job, rc, done, inventory{...}, nvml[...], gpu_steps[...], oom, fs, residue}."""
    seen: dict[str, Any] = {"inventory": {}, "nvml": [], "nvml_error": [], "gpu_steps": [], "deep": {},
                            "oom": {"lines": []}, "fs": {}, "residue": "", "output": lines, "trail": []}
    for line in lines:
        _follow(seen["trail"], line)
        key, sep, value = line.partition("=")
        if not sep:
            if line.startswith("oom."):  # srun's own report of the kill carries no key
                seen["oom"]["lines"].append(line[len("oom."):])
            continue
        kind, _, field = key.partition(".")
        if key in ("job", "done", "rc"):
            seen[key] = value
        elif kind == "inventory" and field == "nvml":
            i, _, rest = value.partition(" ")
            uuid, _, model = rest.partition(" ")
            seen["nvml"].append({"index": i, "uuid": uuid, "model": model})
        elif kind == "inventory" and field == "nvml_error":
            seen["nvml_error"].append(value)
        elif kind == "inventory":
            seen["inventory"][field] = value
        elif kind == "gpu" and field == "step":
            seen["gpu_steps"].append(_gpu_step(line[len("gpu."):]))
        elif kind == "oom":
            if field in ("rc", "step"):
                seen["oom"][field] = value
            else:
                seen["oom"]["lines"].append(line[len("oom."):])
        elif kind == "fs" and field in ("rc", "jobroot", "rowrite"):
            seen["fs"][field] = value
        elif kind == "residue" and field == "residue":
            seen["residue"] = value
        elif kind == "deep":
            name, _, what = field.rpartition(".")
            d = seen["deep"].setdefault(name, {"rc": None, "out": []})
            if what == "rc":
                d["rc"] = value
            elif what == "out":
                d["out"].append(value)
    return seen


_STEP_KINDS = ("inventory", "gpu", "oom", "fs", "residue", "deep")


def _follow(trail: list[list], line: str) -> None:
    """Extend `trail`, the steps a job's output reached in order as [name, lines], by `line`:
    where a hung job stopped is the last entry. A single-GPU step counts once, by its result."""
    key = line.partition("=")[0]
    kind, dot, field = key.partition(".")
    if not dot or kind not in _STEP_KINDS or (kind == "gpu" and field != "step"):
        return
    name = f"deep:{field.rpartition('.')[0]}" if kind == "deep" else kind
    if trail and trail[-1][0] == name:
        trail[-1][1] += 1
    else:
        trail.append([name, 1])


def stopped_after(seen: dict[str, Any], gpus: int) -> str:
    """Where a job that never printed done=1 stopped, from the steps its output reached."""
    trail = seen.get("trail") or []
    if not trail:
        return "no step printed anything"
    parts = [f"{n} ({c} of {gpus} steps)" if n == "gpu" else n for n, c in trail]
    return "its output stops after " + ", ".join(parts)


def _gpu_step(text: str) -> dict[str, Any]:
    """'step=3 cvd=0 held=8 devices=0:EPERM,1:ENXIO' -> {step, cvd, held, devices{index: result}}."""
    f = dict(p.split("=", 1) for p in text.split() if "=" in p)
    devices = {}
    for d in f.get("devices", "").split(","):
        i, _, r = d.partition(":")
        if i.isdigit():
            devices[int(i)] = r
    return {"step": f.get("step", ""), "cvd": f.get("cvd", ""), "held": f.get("held", ""), "devices": devices}


def cpu_count(cpuset: str) -> Optional[int]:
    """'0-3,8,10-11' -> 7; None when it is not a CPU list (an error message)."""
    total = 0
    for part in cpuset.strip().split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            return None
        total += int(m.group(2) or m.group(1)) - int(m.group(1)) + 1
    return total


def judge_node(seen: dict[str, Any], e: NodeExpect, gres_used: str, oom_state: Optional[str]) -> list[dict]:
    """Every check of one node's job, passed or not, with what was seen. `oom_state`: the
    over-memory step's state in sacct (None without accounting: srun's report is read)."""
    checks = [check("job", seen.get("rc") == "0" and seen.get("done") == "1",
                    f"job {seen.get('job') or '(none)'} exited {seen.get('rc', '?')}"
                    + ("" if seen.get("done") == "1" else f", before its last step: {stopped_after(seen, e.gpus)}"))]
    inv = seen["inventory"]
    if e.gpus:
        if e.nvml:
            checks.append(_nvml(seen, e))
        cvd = inv.get("cvd", "unset")
        checks.append(check("visible_devices", count_visible_gpus(cvd) == e.gpus and cvd != "unset",
                            f"CUDA_VISIBLE_DEVICES={cvd} ({count_visible_gpus(cvd)} of {e.gpus})"))
        checks += _gpu_steps(seen["gpu_steps"], e.gpus)
    cpus = cpu_count(inv.get("cpuset", ""))
    checks.append(check("cgroup_cpus", cpus == e.cpus and inv.get("cpus_on_node") == str(e.cpus),
                        f"cpuset {inv.get('cpuset', '(not read)')} ({cpus} CPUs), SLURM_CPUS_ON_NODE="
                        f"{inv.get('cpus_on_node', '?')}, node has {e.cpus}"))
    limit = inv.get("mem_limit", "")
    checks.append(check("cgroup_memory", limit == str(e.mem_mib * MIB),
                        f"memory limit {limit or '(not read)'} bytes, job asked {e.mem_mib} MiB"))
    checks.append(_oom(seen["oom"], oom_state))
    fs = seen["fs"]
    checks.append(check("job_root", fs.get("jobroot") == "ok", f"job root write: {fs.get('jobroot', 'not tried')}"))
    if e.readonly:
        checks.append(check("models_read_only", fs.get("rowrite") == "EROFS",
                            f"write into the model store: {fs.get('rowrite', 'not tried')}"))
    checks.append(check("failed_job_leaves_nothing", fs.get("rc") == "3" and seen.get("residue") == "none",
                        f"failing step exited {fs.get('rc', '?')}; its job-root directory afterwards: "
                        f"{seen.get('residue') or 'not checked'}"))
    if e.marker:
        checks.append(check("model_marker", inv.get("marker") == "ok",
                            f"model marker {inv.get('marker', 'not checked')}"))
    for c in e.deep:
        d = seen["deep"].get(c["name"]) or {"rc": None, "out": []}
        checks.append(judge_deep(c, d["rc"], d["out"]))
    if e.gpus:
        used = re.match(r"\S*?gpu(?::[A-Za-z0-9_]+)?:(\d+)", gres_used)
        checks.append(check("gpus_released", bool(used) and used.group(1) == "0",  # type: ignore[union-attr]
                            f"GresUsed={gres_used or '(not read)'} after the job"))
    return checks


def judge_deep(c: dict, rc: Optional[str], out: list[str]) -> dict:
    """A deep check: exit 0 and, with `figure`, the number read from its output at least `min_figure`."""
    own = [line for line in out if not line.startswith(("srun: ", "slurmstepd"))]  # not Slurm's own notes
    name, last = f"deep:{c['name']}", (own[-1][:120] if own else "no output")
    if rc is None:
        return check(name, False, "did not run (the job ended before it)")
    if c.get("figure") is None:
        return check(name, rc == "0", f"exit {rc}; {last}")
    m = re.search(c["figure"], "\n".join(out))
    try:
        figure = float(m.group(1)) if m else None
    except ValueError:
        figure = None
    low = c.get("min_figure")
    ok = rc == "0" and figure is not None and (low is None or figure >= low)
    return check(name, ok, f"exit {rc}; figure {f'{figure:g}' if figure is not None else '(not found)'}"
                 + (f" (at least {float(low):g} needed)" if low is not None else "") + ("" if ok else f"; {last}"))


def _nvml(seen: dict[str, Any], e: NodeExpect) -> dict:
    gpus = seen["nvml"]
    problems = []
    if len(gpus) != e.gpus:
        problems.append(f"NVML sees {len(gpus)} GPUs, the stack declares {e.gpus}")
    models = sorted({g["model"] for g in gpus})
    if e.model and models != [e.model]:
        problems.append(f"models {models}, the stack declares {e.model!r}")
    uuids = tuple(g["uuid"] for g in gpus)
    if e.uuids and uuids != e.uuids:
        problems.append(f"UUIDs differ from the GPU layer's record: missing {sorted(set(e.uuids) - set(uuids))}, "
                        f"new {sorted(set(uuids) - set(e.uuids))}")
    if seen["nvml_error"]:
        problems.append("NVML: " + " ".join(seen["nvml_error"])[:200])
    return check("nvml", not problems, "; ".join(problems) if problems else
                 f"{len(gpus)} x {e.model or ', '.join(models)}, UUIDs as the GPU layer recorded them")


def _gpu_steps(steps: list[dict], count: int) -> list[dict]:
    """Each of `count` single-GPU steps, all holding their GPU at once, gets EPERM opening every
    device but one (the device cgroup), and each step's one is a different GPU of the node."""
    own = [sorted(i for i, r in s["devices"].items() if r in ALLOWED) for s in steps]
    odd = sorted({f"device {i}: {r}" for s in steps for i, r in s["devices"].items()
                  if r not in ALLOWED and r != DENIED})
    leaky = [o for o in own if len(o) > 1]
    shut = [s["step"] for s, o in zip(steps, own) if not o]
    if not steps:
        confined = check("device_cgroup", False, "no single-GPU step ran")
    elif leaky or odd or shut:
        confined = check("device_cgroup", False, "; ".join(
            ([f"{len(leaky)} of {len(steps)} single-GPU steps could open more than their GPU "
              f"(up to {max(len(o) for o in leaky)} of {count} devices)"] if leaky else [])
            + ([f"step(s) {', '.join(shut)} could open no GPU device, not even their own"] if shut else [])
            + odd))
    else:
        confined = check("device_cgroup", True,
                         f"each single-GPU step got EPERM opening the node's other {count - 1} GPU devices")
    held = sorted({s["held"] for s in steps})
    indices = sorted(o[0] for o in own if len(o) == 1)
    ok = len(steps) == count and indices == list(range(count)) and held == [str(count)]
    used = check("every_gpu_used", ok,
                 f"{len(steps)} single-GPU steps held their GPUs at once (barrier saw {', '.join(held) or '0'} "
                 f"of {count}); the GPUs they could open: {', '.join(str(o[0]) if len(o) == 1 else '?' for o in own)}")
    return [confined, used]


def _oom(oom: dict[str, Any], state: Optional[str]) -> dict:
    text = " ".join(oom["lines"])
    killed = "Out Of Memory" in text or "oom-kill" in text
    if state is not None:
        return check("oom_confined", state.startswith("OUT_OF_MEMORY"),
                     f"step {oom.get('step', '?')} past its --mem: sacct State={state or '(no record)'}")
    return check("oom_confined", killed and oom.get("rc") not in (None, "0"),
                 f"step {oom.get('step', '?')} past its --mem exited {oom.get('rc', '?')}"
                 + (", killed by the cgroup's OOM handler" if killed else ", not reported out of memory"))


def first_failure(checks: list[dict]) -> str:
    """The drain reason: this layer's prefix and the first failed check."""
    failed = [c for c in checks if not c["passed"]]
    if not failed:
        return ""
    return f"{DRAIN_PREFIX} {failed[0]['name']}: {failed[0]['seen']}"[:200]
