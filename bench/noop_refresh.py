"""Benchmark: a no-op `pulumi up --refresh` on 1 and on 3 lab hosts.

Prints wall time and SSH round trips per host (from the transport's command
log), with and without `--skip-preview` (a plain `up --refresh` refreshes twice:
once in its preview, once in the update). Each host carries one of every primitive (6 resources). The engine
serves at most 4 dynamic-provider calls at once, so per-host resources run in
waves; the figures show what that costs. Needs the lab: `python -m lab up`.

    .venv/bin/python bench/noop_refresh.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.lab.labhosts import command_log, lab_conn, ssh  # noqa: E402
from tests.pulumi_cli import PulumiProject  # noqa: E402

PROGRAM = ROOT / "tests" / "lab" / "programs" / "primitives"


def bench(nodes: list[str], repeat: int, skip_preview: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        proj = PulumiProject.copy_of(Path(tmp), [PROGRAM / "Pulumi.yaml", PROGRAM / "__main__.py",
                                                 ROOT / "components"])
        log = Path(tmp) / "commands.jsonl"
        proj.env["GPU_FLEET_COMMAND_LOG"] = str(log)
        out = ssh(nodes[0], "apt-get -q update >/dev/null 2>&1; apt-cache policy hello").stdout
        version = next(line.split()[1] for line in out.splitlines() if "Candidate:" in line)
        proj.init_stack("bench")
        proj.run("config", "set", "conns", json.dumps([lab_conn(n) for n in nodes]))
        proj.run("config", "set", "packages", json.dumps({"hello": version}))
        proj.run("config", "set", "--secret", "secret", "bench-secret")
        try:
            proj.run("up", "--yes", "--stack", "bench")
            times: list[float] = []
            trips: Counter[str] = Counter()
            for _ in range(repeat):
                log.unlink(missing_ok=True)
                start = time.monotonic()
                proj.run("up", "--yes", "--stack", "bench", "--refresh", "--expect-no-changes",
                         *(["--skip-preview"] if skip_preview else []))
                times.append(time.monotonic() - start)
                entries = command_log(log)
                assert not [e for e in entries if e["mutating"]], "a no-op refresh sent a mutating command"
                trips = Counter(e["host"] for e in entries)
            return {"hosts": len(nodes), "resources": 6 * len(nodes),
                    "wall_s_median": round(statistics.median(times), 2),
                    "wall_s_all": [round(t, 2) for t in times],
                    "round_trips_per_host": dict(sorted(trips.items()))}
        finally:
            proj.run("destroy", "--yes", "--stack", "bench", check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for nodes in (["node1"], ["node1", "node2", "node3"]):
        for skip in (False, True):
            r = bench(nodes, args.repeat, skip)
            mode = "up --refresh --skip-preview" if skip else "up --refresh"
            print(f"no-op {mode}, {r['hosts']} host(s), {r['resources']} resources: "
                  f"median {r['wall_s_median']} s (runs {r['wall_s_all']}), "
                  f"SSH round trips per host {r['round_trips_per_host']}")


if __name__ == "__main__":
    main()
