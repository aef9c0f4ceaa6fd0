"""Benchmark: the tenancy layer with many teams (issue 35, item 7): a no-op preview and refresh.

Deploys the lab stack with accounting and a tenancy section of N teams (3 with the lab's GPUs
guaranteed, the rest borrowing only: 0 guaranteed), then times a no-op `preview --refresh` and
a no-op `refresh`, counting the SSH round trips that carry `sacctmgr` (from the transport's
command log). The comparison is what an admin's script would do without the layer: one
`sacctmgr show` per team for its QOS and one for its association, here all in one shell on
the controller (the cheapest form of that loop: no SSH per call). Needs the lab
(`python -m lab up`); the stack is destroyed at the end (the accounting history stays).

    .venv/bin/python bench/tenancy_teams.py [--teams 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.lab.labhosts import command_log, repo_version, ssh  # noqa: E402
from tests.pulumi_cli import PulumiProject  # noqa: E402


def tenancy(teams: int) -> dict:
    return {"enabled": True, "job_submit": False,
            "teams": [{"name": f"team{i:03d}", "guaranteed": {"v100": 8 if i < 3 else 0},
                       "fairshare": 1 + i % 10, "members": [f"user{i:03d}"]} for i in range(teams)],
            "opportunistic": {"qos": "scavenger", "max_gpus_per_team": 16, "grace_s": 60}}


def sacctmgr_trips(log: Path) -> tuple[int, int]:
    """(round trips carrying sacctmgr, of them mutating)."""
    trips = [e for e in command_log(log) if "sacctmgr" in e["cmd"]]
    return len(trips), len([e for e in trips if e["mutating"]])


def timed(proj: PulumiProject, log: Path, *args: str) -> float:
    log.unlink(missing_ok=True)
    start = time.monotonic()
    proj.run(*args, "--stack", "lab", timeout=1800)
    return time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teams", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proj = PulumiProject.copy_of_repo(Path(tmp))
        log = Path(tmp) / "commands.jsonl"
        proj.env["GPU_FLEET_COMMAND_LOG"] = str(log)
        proj.init_stack("lab")
        path = proj.dir / "stacks" / "Pulumi.lab.yaml"
        data = yaml.safe_load(path.read_text())
        data["config"]["gpu-fleet:accounting"] = {
            "enabled": True, "mariadb_version": repo_version("mariadb-server"),
            "nftables_version": repo_version("nftables")}
        data["config"]["gpu-fleet:tenancy"] = tenancy(args.teams)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        try:
            first = timed(proj, log, "up", "--yes")
            print(f"{args.teams} teams: first up (the whole lab stack with accounting) {first:.1f} s, "
                  f"sacctmgr round trips {sacctmgr_trips(log)[0]}", flush=True)
            preview = timed(proj, log, "preview", "--refresh", "--expect-no-changes")
            p_trips, p_mut = sacctmgr_trips(log)
            print(f"  no-op preview --refresh: {preview:.1f} s, sacctmgr round trips {p_trips}", flush=True)
            refresh = timed(proj, log, "refresh", "--yes", "--expect-no-changes")
            r_trips, r_mut = sacctmgr_trips(log)
            print(f"  no-op refresh:           {refresh:.1f} s, sacctmgr round trips {r_trips}", flush=True)
            assert p_mut == 0 and r_mut == 0, "a no-op preview or refresh sent a mutating sacctmgr"
            objs = ssh("ctl", "sacctmgr -n -P show qos format=Name | grep -c '^team'; "
                              "sacctmgr -n -P show assoc format=User | grep -c '^user'").stdout.split()
            print(f"  in slurmdbd: {objs[0]} team QOS, {objs[1]} members' associations", flush=True)
            loop = ("for t in $(sacctmgr -n -P show account format=Account | grep '^team'); do "
                    "sacctmgr -n -P show qos where name=$t >/dev/null; "
                    "sacctmgr -n -P show assoc where account=$t >/dev/null; done")
            start = time.monotonic()
            ssh("ctl", loop, timeout=3600)
            per_team = time.monotonic() - start
            print(f"  per-team sacctmgr loop on the controller (2 x {args.teams} calls, one shell): "
                  f"{per_team:.1f} s; the layer's one probe reads all of them in "
                  f"{r_trips} round trip(s)", flush=True)
        finally:
            proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=1800)


if __name__ == "__main__":
    main()
