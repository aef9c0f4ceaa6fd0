"""Forget a dead host's resources from a stack's state, touching no host.

    python -m components.forget <stack> <host> [--cwd DIR] [--yes] [--pulumi pulumi]
    make forget STACK=<stack> NODE=<host> [ARGS=--yes]

For a machine that is gone for good: its resources cannot be deleted (nothing answers), and
while they stay in the state every `up` and `destroy` tries to. This reads the state with
`pulumi stack export`, takes every resource whose `conn` (input or output) names the host,
prints each URN, and removes them with `pulumi state delete <urn> --yes`, one at a time,
dependents before what they depend on. Nothing is sent to the host or any other: what
gpu-fleet left on the machine stays there.

It refuses (exit 1, changing nothing):

- while the stack's config still declares the host (in `gpu-fleet:hosts`, or in
  `gpu-fleet:nodes` with an owner other than `unreachable`): the program would declare its
  resources again and the next `up` would try to recreate them on it. Mark the node
  `owner: unreachable` (and take it out of every partition), or remove it from the stack;
- while a resource of another host (or of the whole fleet) still records a dependency on
  one of them: forgetting it from state would leave that one pointing at nothing, and
  deleting it too would make the next `up` recreate it on a live host. Run `up` once with
  the host out of the stack and its resources excluded (the command is printed): the rest
  of the fleet is recorded again without the host, and the dead host is not contacted.
  Then run forget again.

Without `--yes` it asks on a terminal and refuses otherwise. Exit codes: 0 forgotten (or
nothing recorded on that host), 1 refused or a `pulumi` command failed, 2 usage.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import yaml

from .config.project import PROJECT

Resource = dict[str, Any]


def host_of(res: Resource) -> Optional[str]:
    """The host a resource acts on: the name in its recorded `conn` (outputs, else inputs)."""
    for key in ("outputs", "inputs"):
        conn = (res.get(key) or {}).get("conn")
        if isinstance(conn, dict) and isinstance(conn.get("name"), str):
            return conn["name"]
    return None


def references(res: Resource) -> set[str]:
    """Every URN a resource's state points at: parent, dependencies, property dependencies,
    deletedWith (what `pulumi state delete` refuses to leave dangling)."""
    out = set(res.get("dependencies") or [])
    for deps in (res.get("propertyDependencies") or {}).values():
        out |= set(deps or [])
    for key in ("parent", "deletedWith"):
        if res.get(key):
            out.add(res[key])
    return out


def resources_of(state: dict) -> list[Resource]:
    return list((state.get("deployment") or {}).get("resources") or [])


def targets(resources: Iterable[Resource], host: str) -> list[str]:
    return [r["urn"] for r in resources if host_of(r) == host]


@dataclass(frozen=True)
class Blocker:
    dependent: str
    dependent_host: Optional[str]
    target: str

    def __str__(self) -> str:
        where = f"on {self.dependent_host}" if self.dependent_host else "of the whole fleet (no single host)"
        return f"{self.dependent} ({where}) depends on {self.target}"


def blockers(resources: list[Resource], forget: list[str]) -> list[Blocker]:
    """Resources outside `forget` whose state points at one inside it."""
    gone = set(forget)
    return [Blocker(r["urn"], host_of(r), t) for r in resources if r["urn"] not in gone
            for t in sorted(references(r) & gone)]


def delete_order(resources: list[Resource], forget: list[str]) -> list[str]:
    """`forget` ordered so that nothing left in the state points at a resource already removed:
    children and dependents first (the state's own order, reversed, among equals)."""
    left = [r for r in resources if r["urn"] in set(forget)]
    order: list[str] = []
    while left:
        pointed = set().union(*(references(r) for r in left))
        ready = [r for r in reversed(left) if r["urn"] not in pointed]
        if not ready:  # a cycle cannot be recorded by the engine; keep the state's order
            ready = list(reversed(left))
        order += [r["urn"] for r in ready]
        done = {r["urn"] for r in ready}
        left = [r for r in left if r["urn"] not in done]
    return order


def stack_file(cwd: Path, stack: str) -> Path:
    project = yaml.safe_load((cwd / "Pulumi.yaml").read_text()) or {}
    return cwd / (project.get("stackConfigDir") or ".") / f"Pulumi.{stack.rsplit('/', 1)[-1]}.yaml"


def declared(config: dict, host: str) -> Optional[str]:
    """Why the stack still declares `host` (None: it does not, or only as unreachable)."""
    for role, spec in (config.get(f"{PROJECT}:hosts") or {}).items():
        if isinstance(spec, dict) and spec.get("name") == host:
            return f"it is the stack's {role} host ({PROJECT}:hosts.{role})"
    for i, node in enumerate(config.get(f"{PROJECT}:nodes") or []):
        if isinstance(node, dict) and node.get("name") == host and node.get("owner") != "unreachable":
            return f"{PROJECT}:nodes[{i}] declares it with owner {node.get('owner')!r}"
    return None


def up_command(cwd: Path, stack: str, exclude: Iterable[str]) -> str:
    """`make up`'s pulumi command (policy pack and the stack's relaxations) with `--exclude` for
    each URN; spelled for a shell: the URNs hold `$`, which make would expand in ARGS."""
    name = stack.rsplit("/", 1)[-1]
    policy = " --policy-pack policies" + (f" --policy-pack-config policies/stacks/{name}.json"
                                          if (cwd / "policies" / "stacks" / f"{name}.json").exists() else "")
    return f"bin/pulumi up --stack {stack}{policy} " + " ".join(f"--exclude {shlex.quote(u)}" for u in exclude)


def _say(msg: str) -> None:
    print(f"forget: {msg}", flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m components.forget", description=__doc__.splitlines()[0])
    ap.add_argument("stack")
    ap.add_argument("host", help="the host (node) name, as the stack names it")
    ap.add_argument("--cwd", default=".", help="the project directory (default: .)")
    ap.add_argument("--yes", action="store_true", help="forget without asking")
    ap.add_argument("--pulumi", default="pulumi", help="the Pulumi CLI (default: pulumi on PATH)")
    a = ap.parse_args(argv)
    cwd = Path(a.cwd)

    try:
        sf = stack_file(cwd, a.stack)
        config = (yaml.safe_load(sf.read_text()) or {}).get("config") or {}
    except (OSError, yaml.YAMLError) as e:
        _say(f"cannot read the project or stack file in {cwd} (forget checks that the stack no longer "
             f"declares the host): {e}")
        return 1
    why = declared(config, a.host)
    if why:
        _say(f"refusing to forget {a.host}: {sf} still declares it: {why}. The program would declare its "
             f"resources again and the next `up` would recreate them on {a.host}. Mark it `owner: unreachable` "
             f"(and take it out of every partition) or remove it from the stack, then run forget again.")
        return 1

    p = subprocess.run([a.pulumi, "stack", "export", "--stack", a.stack], cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        _say(f"`pulumi stack export --stack {a.stack}` failed (exit {p.returncode}):\n{p.stderr.strip()}")
        return 1
    resources = resources_of(json.loads(p.stdout or "{}"))
    forget = targets(resources, a.host)
    if not forget:
        _say(f"stack {a.stack} records no resource on {a.host}: nothing to forget")
        return 0

    blocked = blockers(resources, forget)
    if blocked:
        _say(f"refusing to forget {a.host}'s resources: other resources still record a dependency on them "
             f"(forgetting only {a.host}'s would leave these pointing at nothing; forgetting these too would "
             "make the next `up` recreate them on a live host):")
        for b in blocked:
            print(f"  {b}")
        _say(f"with {a.host} out of the stack, run `up` once excluding {a.host}'s resources (they are not "
             f"deleted, so {a.host} is not contacted); it records the others again without {a.host}:\n"
             f"  {up_command(cwd, a.stack, forget)}\n"
             f"then run forget again.")
        return 1

    order = delete_order(resources, forget)
    _say(f"stack {a.stack}: {len(order)} resource(s) recorded on {a.host}; forgetting them from the state "
         f"(nothing is sent to {a.host} or any other host; what is on the machine stays there):")
    for urn in order:
        print(f"  {urn}")
    if not a.yes:
        if not sys.stdin.isatty():
            _say("nothing forgotten: run again with --yes (make forget ... ARGS=--yes) to forget them")
            return 1
        if input(f"forget these {len(order)} resource(s) of {a.host}? [y/N] ").strip().lower() not in ("y", "yes"):
            _say("nothing forgotten")
            return 1

    done: list[str] = []
    for urn in order:
        r = subprocess.run([a.pulumi, "state", "delete", urn, "--stack", a.stack, "--yes", "--non-interactive"],
                           cwd=cwd, capture_output=True, text=True)
        if r.returncode != 0:
            _say(f"`pulumi state delete {urn}` failed (exit {r.returncode}):\n{(r.stdout + r.stderr).strip()}")
            _say(f"forgot {len(done)} of {len(order)} before that" + "".join(f"\n  {u}" for u in done))
            return 1
        done.append(urn)
        print(f"  forgot {urn}", flush=True)
    _say(f"forgot {len(done)} resource(s) of {a.host} from stack {a.stack}:" + "".join(f"\n  {u}" for u in done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
