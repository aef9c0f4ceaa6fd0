"""Benchmark: the fleet acceptance at 1, 3, 6 and 12 lab nodes, in parallel and node by node.

Brings the lab up with the largest node count (fresh hosts from the cached image), deploys the
lab stack once (its first `up` judges every node), then for each node count k runs the layer's
own judgement (`FleetAcceptanceProvider.judge`, with the props the deployed stack recorded,
cut to the first k nodes, nothing judged before) `--repeat` times: every node's job at once
and the all-node job, real Slurm over SSH. Against it, what an admin would otherwise do: the
same per-node check node after node (k one-node judgements). Prints the median wall times,
their ratio to the 1-node time, what each added node costs as a share of it (issue 34:
<= 10 %), and the CPU seconds the controller and the nodes spent (each lab host's cgroup,
cpuacct): every lab host shares this machine's cores, so the nodes' own work, which on a
fleet runs on each node's CPUs, here queues for the same few. Leaves the lab down unless
--leave-up.

    .venv/bin/python bench/acceptance.py [--nodes 1,3,6,12] [--repeat 3] [--leave-up]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.layers.acceptance.provider import FleetAcceptanceProvider  # noqa: E402
from tests.lab.conftest import lab_command  # noqa: E402
from tests.pulumi_cli import PulumiProject  # noqa: E402

STACK = "lab"


def recorded_props(proj: PulumiProject) -> dict:
    """The fleet acceptance's inputs as the deployed stack recorded them."""
    state = json.loads(proj.run("stack", "export", "--stack", STACK).stdout)
    res = next(r for r in state["deployment"]["resources"] if r["urn"].endswith("::fleet-acceptance"))
    return res["inputs"]


def cut(props: dict, nodes: list[str], report_dir: Path) -> dict:
    return {**props, "admitted": nodes, "nodes": {n: props["nodes"][n] for n in nodes},
            "node_conns": {n: props["node_conns"][n] for n in nodes}, "min_nodes": None,
            "report_dir": str(report_dir)}


CPUACCT = Path("/sys/fs/cgroup/cpuacct/gpu-fleet-lab")


def host_cpu_s() -> dict[str, float]:
    """CPU seconds each lab host has used since it booted (its cgroup's cpuacct.usage)."""
    return {d.name: int((d / "cpuacct.usage").read_text()) / 1e9 for d in CPUACCT.iterdir()
            if (d / "cpuacct.usage").exists()}


def judged(props: dict) -> tuple[float, float, float]:
    """(wall s, the controller's CPU s, the nodes' CPU s) of one judgement."""
    before, start = host_cpu_s(), time.monotonic()
    out = FleetAcceptanceProvider().judge(props, {})
    took, after = time.monotonic() - start, host_cpu_s()
    assert out["accepted"] == props["admitted"], out["failed"]
    used = {h: after[h] - before.get(h, 0.0) for h in after}
    return took, used.get("ctl", 0.0), sum(v for h, v in used.items() if h.startswith("node"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,3,6,12")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--leave-up", action="store_true")
    args = ap.parse_args()
    counts = [int(x) for x in args.nodes.split(",")]
    rows: list[dict[str, float]] = []
    os.chdir(ROOT)  # the recorded SSH key and known_hosts are relative to the project root
    try:
        lab_command("down", timeout=600)
        lab_command("up", "--nodes", str(max(counts)), timeout=1800)
        with tempfile.TemporaryDirectory(prefix="gpu-fleet-bench-acceptance-") as d:
            tmp = Path(d)
            proj = PulumiProject.copy_of_repo(tmp)
            proj.init_stack(STACK)
            start = time.monotonic()
            proj.run("up", "--yes", "--stack", STACK, "--skip-preview", timeout=3600)
            print(f"first up of {max(counts)} nodes: {time.monotonic() - start:.1f} s", flush=True)
            props = recorded_props(proj)
            names = list(props["admitted"])
            for k in counts:
                nodes = names[:k]
                runs = sorted(judged(cut(props, nodes, tmp / "r")) for _ in range(args.repeat))
                wall, ctl_cpu, nodes_cpu = runs[len(runs) // 2]
                serial = sum(judged(cut(props, [n], tmp / "r"))[0] for n in nodes)
                rows.append({"nodes": k, "parallel_s": round(wall, 2), "node_by_node_s": round(serial, 2),
                             "ctl_cpu_s": round(ctl_cpu, 2), "nodes_cpu_s": round(nodes_cpu, 2)})
                print(json.dumps(rows[-1]), flush=True)
            proj.run("destroy", "--yes", "--stack", STACK, timeout=1800)
    finally:
        if not args.leave_up:
            lab_command("down", timeout=600)
    base = rows[0]
    print(f"\n{os.cpu_count()} cores on this machine, shared by every lab host")
    print("| nodes | acceptance s, all at once (x 1-node) | per added node, % of 1-node "
          "| node by node s | node by node / all at once | controller CPU s | nodes' CPU s (per node) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        added = r["nodes"] - base["nodes"]
        add = f"{100 * (r['parallel_s'] - base['parallel_s']) / added / base['parallel_s']:.1f}" if added else "-"
        print(f"| {r['nodes']} | {r['parallel_s']} ({r['parallel_s'] / base['parallel_s']:.2f}) | {add} | "
              f"{r['node_by_node_s']} | {r['node_by_node_s'] / r['parallel_s']:.2f} | {r['ctl_cpu_s']} | "
              f"{r['nodes_cpu_s']} ({r['nodes_cpu_s'] / r['nodes']:.2f}) |")


if __name__ == "__main__":
    main()
