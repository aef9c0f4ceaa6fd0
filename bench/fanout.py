"""Benchmark: first converge and a no-op `up --refresh` of the lab stack at 1, 3, 6 and 12 nodes
(issue 16, item 3), with the ratios to the 1-node time and SSH commands per host.

For each size: `python -m lab down`, `python -m lab up --nodes N` (fresh hosts), then in a temp
copy of the project with the lab stack as `lab up` wrote it (GPU baseline, Slurm, canary; the
GPUs are the lab's test double): `pulumi up --skip-preview` from an empty state (first converge),
then `pulumi up --refresh --skip-preview --expect-no-changes` (the no-op), counting the SSH
round trips per host from the transport's command log (GPU_FLEET_COMMAND_LOG) and asserting
that the no-op sent no mutating command. The canary-first gate (the only serial step) is read
from the engine's per-resource durations of the canary's resources.

    .venv/bin/python bench/fanout.py [--nodes 1,3,6,12]

Needs root and the lab machine; takes the lab (brings it down at the end).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.lab.labhosts import command_log  # noqa: E402
from tests.pulumi_cli import PulumiProject  # noqa: E402


def lab(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "lab", *args], cwd=ROOT, check=True, capture_output=True, text=True,
                   timeout=900)


def timed_up(proj: PulumiProject, *extra: str) -> tuple[float, str]:
    t0 = time.monotonic()
    p = proj.run("up", "--yes", "--skip-preview", "--stack", "lab", *extra, timeout=3600)
    return time.monotonic() - t0, p.stdout


def canary_gate_s(out: str) -> float:
    """Seconds the canary's own resources took (the serial gate before the other nodes)."""
    return sum(float(m.group(1)) for m in re.finditer(r"canary\S* created \(([\d.]+)s\)", out))


def bench(n: int) -> dict:
    lab("down")
    lab("up", "--nodes", str(n))
    with tempfile.TemporaryDirectory(prefix=f"fanout{n}-") as d:
        tmp = Path(d)
        proj = PulumiProject.copy_of_repo(tmp)
        log = tmp / "commands.jsonl"
        proj.env["GPU_FLEET_COMMAND_LOG"] = str(log)
        proj.init_stack("lab")
        first, out = timed_up(proj)
        gate = canary_gate_s(out)
        resources = int(re.search(r"\+ (\d+) created", out).group(1))
        log.unlink()
        noop, _ = timed_up(proj, "--refresh", "--expect-no-changes")
        cmds = command_log(log)
        assert not [c for c in cmds if c["mutating"]], "the no-op sent a mutating command"
        per_host = Counter(c["host"] for c in cmds)
        nodes = [h for h in per_host if h.startswith("node")]
    return {"nodes": n, "resources": resources, "first": first, "gate": gate, "noop": noop,
            "cmds_node": statistics.median(per_host[h] for h in nodes) if nodes else 0,
            "cmds_ctl": per_host.get("ctl", 0), "cmds_storage": per_host.get("storage", 0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="1,3,6,12")
    args = ap.parse_args()
    rows = []
    try:
        for n in (int(x) for x in args.nodes.split(",")):
            rows.append(bench(n))
            r = rows[-1]
            print(f"  {n} nodes: first converge {r['first']:.1f} s (canary gate {r['gate']:.1f} s), "
                  f"no-op refresh {r['noop']:.1f} s, {r['cmds_node']} SSH commands per node", flush=True)
    finally:
        lab("down")
    one = rows[0]
    print("\n| nodes | resources | first converge s | / 1-node | per added node, % of 1-node | canary gate s "
          "| no-op refresh s | / 1-node | per added node, % of 1-node | SSH commands: node (median) / ctl |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        extra = r["nodes"] - one["nodes"]
        pf = f"{100 * (r['first'] - one['first']) / one['first'] / extra:.1f}" if extra else "-"
        pn = f"{100 * (r['noop'] - one['noop']) / one['noop'] / extra:.1f}" if extra else "-"
        print(f"| {r['nodes']} | {r['resources']} | {r['first']:.1f} | {r['first'] / one['first']:.2f} | {pf} | "
              f"{r['gate']:.1f} | {r['noop']:.1f} | {r['noop'] / one['noop']:.2f} | {pn} | "
              f"{r['cmds_node']} / {r['cmds_ctl']} |")


if __name__ == "__main__":
    main()
