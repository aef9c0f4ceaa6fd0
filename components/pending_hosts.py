"""Nodes the stack marks `unreachable` keep what the state records for them, untouched.

    python -m components.pending_hosts <op> <stack> [--cwd DIR] [--pulumi bin/pulumi] -- <pulumi args>

The seed's "pending" node: dead or cut off, its resources still recorded. The program
declares nothing for it (it is in no partition), so a plain `up` would try to delete all
of them on a host that does not answer, and `refresh` and `destroy` would try to reach it.
This runs `pulumi <op>` (up, preview, refresh, destroy) with `--exclude <urn>` for every
resource whose recorded `conn` names such a node, after a warning naming the node and the
count: the engine then neither reads, changes nor deletes them, and the rest of the fleet
rolls out. When the node comes back, set its owner again and `up` takes it up where the
state left it; when it is gone for good, `make forget` removes it from the state.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import yaml

from .config.project import PROJECT
from .forget import host_of, resources_of, stack_file

OPS = ("up", "preview", "refresh", "destroy")


def unreachable(config: dict) -> list[str]:
    """Nodes the stack file marks `owner: unreachable`, in stack order."""
    return [n["name"] for n in config.get(f"{PROJECT}:nodes") or []
            if isinstance(n, dict) and n.get("owner") == "unreachable" and isinstance(n.get("name"), str)]


def excluded(resources: list[dict], hosts: list[str]) -> dict[str, list[str]]:
    """host -> the URNs recorded for it (hosts with none left out)."""
    out: dict[str, list[str]] = {}
    for r in resources:
        h = host_of(r)
        if h in hosts:
            out.setdefault(h, []).append(r["urn"])
    return out


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(prog="python -m components.pending_hosts", description=__doc__.splitlines()[0])
    ap.add_argument("op", choices=OPS)
    ap.add_argument("stack")
    ap.add_argument("--cwd", default=".")
    ap.add_argument("--pulumi", default="bin/pulumi")
    a = ap.parse_args(argv)
    cwd = Path(a.cwd)
    try:
        config = (yaml.safe_load(stack_file(cwd, a.stack).read_text()) or {}).get("config") or {}
    except OSError:
        config = {}
    hosts = unreachable(config)
    exclude: list[str] = []
    if hosts:
        p = subprocess.run([a.pulumi, "stack", "export", "--stack", a.stack], cwd=cwd, capture_output=True,
                           text=True)
        found = excluded(resources_of(json.loads(p.stdout or "{}")), hosts) if p.returncode == 0 else {}
        for h in hosts:
            urns = found.get(h, [])
            if urns:
                print(f"pending_hosts: node {h} is marked unreachable: its {len(urns)} recorded resources are "
                      f"left as they are (not read, changed or deleted) by this {a.op}", file=sys.stderr)
            exclude += [x for u in urns for x in ("--exclude", u)]
    cmd = [a.pulumi, a.op, "--stack", a.stack, *exclude, *rest]
    sys.stderr.flush()
    os.chdir(cwd)
    os.execvp(cmd[0], cmd)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
