"""Benchmark: the lab stack's first converge and no-op `up --refresh` at 1, 3, 6 and 12 nodes.

For each node count: `python -m lab down`, `python -m lab up --nodes N` (fresh hosts from the
cached image), the lab stack (`stacks/Pulumi.lab.yaml` as `lab up` writes it: inventory, GPU
runtime baseline, Slurm with node1 the canary) in a temp copy of the project with an empty
state; then `pulumi up --skip-preview` from that clean state (the first converge; with
`--first-repeat K` K times, each from fresh hosts, and the median kept), and a no-op
`pulumi up --refresh --skip-preview --expect-no-changes` `--repeat` times. It prints wall
times and their ratio to the 1-node time, the time each added node costs as a share of the
1-node time (issue 16: <= 25 % for the first converge, <= 10 % for the no-op), the SSH
commands per host and layer in the no-op (from GPU_FLEET_COMMAND_LOG; a command is counted
for every layer whose resources it probed), and what the canary gate costs: from the canary's
first Slurm command to the first Slurm command on another node, the only serial step (and the
commands it is spent on, `canary_gate_steps`); and
for the median no-op the CPU seconds of each process role of the CLI's tree (bench/scale.py's
watch: CLI, program, provider, ssh clients as "other") and of the whole machine (/proc/stat),
whose rest is the lab hosts themselves (their sshd and probes share the same cores).
Leaves the lab down unless --leave-up (then with the last node count).

    .venv/bin/python bench/fanout.py [--nodes 1,3,6,12] [--repeat 3] [--first-repeat 1] [--policy]
                                     [--parallel 32] [--leave-up]
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale import TICK, timed  # noqa: E402
from tests.lab.conftest import lab_command  # noqa: E402
from tests.lab.labhosts import command_log  # noqa: E402
from tests.pulumi_cli import PulumiProject  # noqa: E402

STACK = "lab"


def layer_of(urn: str) -> str:
    """The layer a resource belongs to: the first gpu-fleet component in its URN's type chain
    that is not the Fleet itself ('gpu-fleet:slurm:SlurmCluster$...' -> 'slurm')."""
    chain = urn.split("::")[2].split("$")
    for t in chain:
        parts = t.split(":")
        if parts[0] == "gpu-fleet" and parts[1] != "index":
            return parts[1]
    return "fleet"


def labels_to_layers(proj: PulumiProject) -> dict[tuple[str, str], str]:
    """(host, 'Kind key') -> layer, for every dynamic resource in the state: the same label the
    provider puts in the command log (components/providers/base.py `_label`)."""
    import dill

    from components.providers.parts import _label, target_of

    state = json.loads(proj.run("stack", "export", "--stack", STACK, "--show-secrets").stdout)
    out = {}
    for r in state["deployment"].get("resources", []):
        outs = r.get("outputs") or {}
        if "__provider" not in outs:
            continue
        provider = dill.loads(base64.b64decode(outs["__provider"]))
        try:
            host = target_of(outs).name
        except Exception:  # a check without one host (fans out inside)
            host = "*"
        out[(host, _label(provider, (outs,)))] = layer_of(r["urn"])
    return out


def per_host_layer(entries: list[dict], layers: dict) -> dict[tuple[str, str], int]:
    counts: Counter = Counter()
    for e in entries:
        seen = {layers.get((e["host"], f), layers.get(("*", f), f"? {f}")) for f in e.get("for") or []}
        for layer in seen or {"(connect)" if e["cmd"] == "true" else f"? {e.get('for')}"}:
            counts[(e["host"], layer)] += 1
    return dict(counts)


def slurm_packages(e: dict, layers: dict) -> bool:
    """A mutating command sent for the Slurm layer's package set."""
    return e["mutating"] and any(f.startswith("PackageSet") and layers.get((e["host"], f)) == "slurm"
                                 for f in e.get("for") or [])


def _gate(entries: list[dict], layers: dict, canary: str) -> tuple[float, float] | None:
    """(start, end) of the canary gate: the canary's first Slurm package command, the first one
    on any other node."""
    starts = [(e["t"] - e["s"], e["host"]) for e in entries if slurm_packages(e, layers)]
    first_canary = min((t for t, h in starts if h == canary), default=None)
    first_other = min((t for t, h in starts if h.startswith("node") and h != canary), default=None)
    if first_canary is None or first_other is None:
        return None
    return first_canary, first_other


def canary_gate_s(entries: list[dict], layers: dict, canary: str) -> float | None:
    """From the canary's Slurm package install to the first one on any other node: the canary's
    packages, key, config, daemons and the canary-first job run while the rest wait."""
    gate = _gate(entries, layers, canary)
    return None if gate is None else round(gate[1] - gate[0], 1)


def canary_gate_steps(entries: list[dict], layers: dict, canary: str) -> list[str]:
    """What the gate is spent on: the commands sent in it (offset from its start, host, the
    resource, seconds), the mutating ones and any read of 0.3 s or more."""
    gate = _gate(entries, layers, canary)
    if gate is None:
        return []
    start, end = gate
    inside = sorted((e for e in entries if start - 0.01 <= e["t"] - e["s"] < end
                     and (e["mutating"] or e["s"] >= 0.3)), key=lambda e: e["t"] - e["s"])
    return [f"+{e['t'] - e['s'] - start:.1f} {e['host']} {(e.get('for') or ['-'])[0]} {e['s']:.1f} s"
            f"{' (read)' if not e['mutating'] else ''}" for e in inside]


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent, from /proc/stat's first line: user, nice, system,
    irq and softirq (idle and iowait left out)."""
    user, nice, system, _idle, _iowait, irq, softirq = Path("/proc/stat").read_text().split()[1:8]
    return sum(int(v) for v in (user, nice, system, irq, softirq)) / TICK


def first_converge(n: int, pack: list[str], tmp: Path) -> tuple[float, float, PulumiProject, Path]:
    """Fresh hosts (lab down, then up with n nodes), an empty state in a copy of the project
    under tmp, and the first converge: (seconds, its start as wall time, the project, its
    command log)."""
    lab_command("down", timeout=600)
    lab_command("up", "--nodes", str(n), timeout=1800)
    tmp.mkdir(parents=True)
    proj = PulumiProject.copy_of_repo(tmp)
    log = tmp / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(log)
    proj.init_stack(STACK)
    start, wall_start = time.monotonic(), time.time()
    proj.run("up", "--yes", "--stack", STACK, "--skip-preview", *pack, timeout=3600)
    return time.monotonic() - start, wall_start, proj, log


def phases(entries: list[dict], layers: dict, canary: str, wall_start: float, up_s: float) -> dict:
    """Where a first converge's time went, seconds from the start of `up`: the first command,
    the canary's Slurm packages, the other nodes' (the gate's end), the last command's end."""
    gate = _gate(entries, layers, canary)
    slurm = [e["t"] - e["s"] for e in entries if e["host"] == canary and slurm_packages(e, layers)]
    at = {"first_command": min(e["t"] - e["s"] for e in entries),
          "canary_packages": gate[0] if gate else min(slurm, default=None),
          "other_packages": gate[1] if gate else None,
          "last_command_end": max(e["t"] for e in entries)}
    return {**{k: None if v is None else round(v - wall_start, 1) for k, v in at.items()}, "up": round(up_s, 1)}


def bench(n: int, repeat: int, policy: bool, parallel: int, first_repeat: int = 1,
          keep_logs: Path | None = None) -> dict:
    pack = ["--policy-pack", str(ROOT / "policies")] if policy else []
    pack += ["--parallel", str(parallel)]
    with tempfile.TemporaryDirectory() as tmp:
        # the first converge `first_repeat` times, each from fresh hosts (its spread is the
        # figure's: one run moved by +-2 points of the per-node ratio); the rest on the last
        firsts, at = [], []
        for i in range(first_repeat):
            wall, wall_start, proj, log = first_converge(n, pack, Path(tmp) / str(i))
            firsts.append(wall)
            first_log = command_log(log)
            if keep_logs:
                keep_logs.mkdir(parents=True, exist_ok=True)
                shutil.copy(log, keep_logs / f"first-{n}-{i}.jsonl")
            layers = labels_to_layers(proj)
            at.append(phases(first_log, layers, "node1", wall_start, wall))
        first = statistics.median(firsts)
        times, cpus = [], []
        for _ in range(repeat):
            log.unlink(missing_ok=True)
            machine = machine_cpu_s()
            wall, roles, _done = timed(proj, "up", "--yes", "--stack", STACK, "--refresh", "--skip-preview",
                                       "--expect-no-changes", *pack, timeout=1800)
            times.append(wall)
            cpus.append({**{r: v["cpu_s"] for r, v in sorted(roles.items())},
                         "machine": round(machine_cpu_s() - machine, 1)})
        noop_log = command_log(log)
        if keep_logs:
            shutil.copy(log, keep_logs / f"noop-{n}.jsonl")
        assert not [e for e in noop_log if e["mutating"]], "a no-op refresh sent a mutating command"
        counts = per_host_layer(noop_log, layers)
        return {"nodes": n, "first_s": round(first, 1), "first_all": [round(t, 1) for t in firsts],
                "first_phases": at,
                "noop_s": round(statistics.median(times), 2),
                "noop_all": [round(t, 2) for t in times],
                # CPU s of the median run (the lower one of an even count): each process role of the CLI's tree
                # ("other": ssh clients), and the whole machine (the lab hosts' sshd and probes are the rest)
                "noop_cpu_s": cpus[times.index(statistics.median_low(times))],
                "first_commands_per_host": dict(Counter(e["host"] for e in first_log)),
                "noop_per_host_layer": {f"{h} {lay}": c for (h, lay), c in sorted(counts.items())},
                "noop_max_per_host_layer": max(c for (h, lay), c in counts.items() if lay != "(connect)"),
                "canary_gate_s": canary_gate_s(first_log, layers, "node1"),
                "canary_gate_steps": canary_gate_steps(first_log, layers, "node1"),
                # what to look at when a run is slow: its longest commands
                "first_slowest": [f"{e['host']} {(e.get('for') or ['-'])[0]} {e['s']:.1f} s {e['cmd'][:60]!r}"
                                  for e in sorted(first_log, key=lambda e: -e["s"])[:4]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,3,6,12")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policy", action="store_true", help="run with the policy pack, as `make up` does")
    ap.add_argument("--first-repeat", type=int, default=1,
                    help="first converges per node count, each from fresh hosts (the median is reported)")
    ap.add_argument("--leave-up", action="store_true")
    ap.add_argument("--parallel", type=int, default=32, help="the engine's --parallel (as the Makefile's)")
    ap.add_argument("--keep-logs", type=Path, help="copy each run's GPU_FLEET_COMMAND_LOG into this folder")
    args = ap.parse_args()
    rows = []
    try:
        for n in (int(x) for x in args.nodes.split(",")):
            r = bench(n, args.repeat, args.policy, args.parallel, args.first_repeat, args.keep_logs)
            rows.append(r)
            print(json.dumps(r), flush=True)
    finally:
        if not args.leave_up:
            lab_command("down", timeout=600)
    base = rows[0]
    print("\n| nodes | first converge s (x 1-node) | per added node, % of 1-node | no-op up --refresh s "
          "(x 1-node) | per added node, % | SSH cmds per host and layer, no-op (max) | canary gate s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        k = r["nodes"] - base["nodes"]
        add_first = f"{100 * (r['first_s'] - base['first_s']) / k / base['first_s']:.1f}" if k else "-"
        add_noop = f"{100 * (r['noop_s'] - base['noop_s']) / k / base['noop_s']:.1f}" if k else "-"
        print(f"| {r['nodes']} | {r['first_s']} ({r['first_s'] / base['first_s']:.2f}) | {add_first} | "
              f"{r['noop_s']} ({r['noop_s'] / base['noop_s']:.2f}) | {add_noop} | "
              f"{r['noop_max_per_host_layer']} | {r['canary_gate_s']} |")


if __name__ == "__main__":
    main()
