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

A run that may contact hosts (all but a preview without --refresh) writes the engine's event
log; when it fails because a host the stack no longer declares cannot be reached over SSH (a
node taken out of the stack whose machine is gone), the way out is printed after the CLI's
own errors: `make forget STACK=<stack> NODE=<node>`. Only this wrapper knows the stack and
reads its file; the provider that raised the error knows neither.

A large fleet (more than `LARGE_FLEET_NODES` nodes):
- gets the operator's view instead of the CLI's line per resource (components/run_summary.py;
  `--view summary|full` chooses at any size): the CLI's output goes to a log under
  `.state/runs/`, and what is printed is progress, then per layer what changed, every error
  and policy violation. An `up` that would ask before applying previews that way first and
  asks here, then applies with `--skip-preview --yes`;
- runs `up` and `destroy` with PULUMI_SKIP_CHECKPOINTS=true (unless set): the engine saves the
  state once, at the end, instead of the whole state after every step, which grows with the
  square of the fleet (bench/README.md: 140 nodes on fake hosts 365.9 s with checkpoints, 20.8 s
  without). A run killed before its end leaves a state without its work; the next `up` adopts
  that work from what each primitive kept on its host (components/providers/kept.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, Optional, TextIO

import yaml

from .config.project import PROJECT
from .forget import declared, host_of, resources_of, stack_file
from . import run_summary

OPS = ("up", "preview", "refresh", "destroy")
#: above this many nodes a stack is run as a large fleet (module docstring)
LARGE_FLEET_NODES = 64
#: a host a run could not reach: HostUnreachable's and HostRemembered's sentence (transport/ssh.py)
#: (the command in backquotes may span lines: a script)
_UNREACHABLE = re.compile(r"host ([A-Za-z0-9._-]+): (?:`(?s:.*?)` failed[^\n]*?: )?cannot reach \S+ over SSH")


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
    ap.add_argument("--view", choices=("auto", "summary", "full"), default="auto",
                    help=f"summary: per layer, not per resource (auto: above {LARGE_FLEET_NODES} nodes)")
    a = ap.parse_args(argv)
    cwd = Path(a.cwd).resolve()
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
    full = with_nodes_file(config, cwd)
    nodes = node_count(full)
    large = nodes > LARGE_FLEET_NODES
    summary = a.view == "summary" or (a.view == "auto" and large)
    if not summary and not contacts_hosts(a.op, rest):
        os.execvp(cmd[0], cmd)
    once = {"PULUMI_SKIP_CHECKPOINTS": "true"}
    if summary and a.op == "up" and not answered(rest):
        preview = [a.pulumi, "preview", "--stack", a.stack, *exclude, *without_up_flags(rest)]
        rc = run_logged(preview, "preview", a.stack, cwd, full, summary, once)
        if rc != 0 or not confirmed(a.stack):
            return rc or 1
        cmd += ["--skip-preview", "--yes"]
    saves_once = large and a.op in ("up", "destroy") and "PULUMI_SKIP_CHECKPOINTS" not in os.environ
    if saves_once:
        print(f"{a.op} of stack {a.stack}: {nodes} nodes, so the state is saved at the end of the "
              f"run, not after every step (a killed run's work is adopted by the next up)", file=sys.stderr)
    return run_logged(cmd, a.op, a.stack, cwd, full, summary, once if saves_once else None)


def run_logged(cmd: list[str], op: str, stack: str, cwd: Path, config: Optional[dict], summary: bool,
               extra_env: Optional[dict[str, str]] = None) -> int:
    """Run the CLI with an event log (the caller's --event-log, kept, or a temporary one); after
    a failure, say how to forget a host that is gone. With `summary`, the CLI's output goes to a
    file under .state/runs/ and the operator's view is printed instead."""
    log, tmp = _event_log_arg(cmd), None
    env = {**os.environ, **(extra_env or {})}
    if log is None:
        tmp = tempfile.mkdtemp(prefix="gpu-fleet-events-")
        log = os.path.join(tmp, "events.jsonl")
        cmd = [*cmd, "--event-log", log]
        env["PULUMI_DEBUG_COMMANDS"] = "true"  # the CLI offers --event-log only so (as to Pulumi's own
        # Automation API, which reads runs the same way)
    try:
        if summary:
            runs = cwd / ".state" / "runs"
            runs.mkdir(parents=True, exist_ok=True, mode=0o700)
            out_path = runs / f"{stack}-{op}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.log"
            print(f"{op} of stack {stack}: the CLI's output goes to {out_path.relative_to(cwd)}; a summary "
                  f"per layer follows (VIEW=full prints every resource)", flush=True)
            fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out, run_summary.Follow(log, op, sys.stdout) as follow:
                rc = run_child(cmd, env, stdout=out)
            print(run_summary.render(op, stack, follow.tally, str(out_path.relative_to(cwd))), flush=True)
            if rc != 0:
                print(f"{op} failed (exit {rc}); the CLI's last lines:\n" + _tail(out_path, 15), file=sys.stderr)
        else:
            rc = run_child(cmd, env)
        if rc != 0:
            for hint in forget_hints(stack, config, unreachable_hosts(_lines(log))):
                print(hint, file=sys.stderr)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return rc


def node_count(config: Optional[dict]) -> int:
    """How many nodes the stack declares (0 when its nodes file cannot be read)."""
    nodes = (config or {}).get(f"{PROJECT}:nodes")
    return len(nodes) if isinstance(nodes, list) else 0


def answered(args: list[str]) -> bool:
    """Whether `up <args>` runs without asking: --yes, or --skip-preview (the CLI then refuses
    to ask without --yes)."""
    return any(x in ("--yes", "-y", "--skip-preview", "-f") or x.startswith("--yes=") for x in args)


#: `up` flags `preview` does not take (each with the number of values it takes)
_UP_ONLY = {"--yes": 0, "-y": 0, "--skip-preview": 0, "-f": 0, "--continue-on-error": 0}


def without_up_flags(args: list[str]) -> list[str]:
    return [x for x in args if x not in _UP_ONLY and not x.startswith("--yes=")]


def confirmed(stack: str) -> bool:
    """The CLI's own question, asked here: only a terminal can answer it."""
    if not sys.stdin.isatty():
        print(f"up of stack {stack}: pass --yes (ARGS=--yes) to apply without a terminal to confirm on",
              file=sys.stderr)
        return False
    try:
        answer = input(f"Apply these changes to stack {stack}? [yes/no] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("yes", "y")


def _tail(path: Path, n: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def contacts_hosts(op: str, args: list[str]) -> bool:
    """Whether `pulumi <op> <args>` may reach hosts: everything but a preview without refresh."""
    return op != "preview" or any(x == "-r" or x == "--refresh" or x == "--refresh=true" for x in args)


def _event_log_arg(args: list[str]) -> Optional[str]:
    """The --event-log path the caller passed on (that file is read, and kept), or None."""
    for i, x in enumerate(args):
        if x == "--event-log" and i + 1 < len(args):
            return args[i + 1]
        if x.startswith("--event-log="):
            return x.split("=", 1)[1]
    return None


def _lines(path: str) -> Iterable[str]:
    try:
        with open(path, errors="replace") as f:
            yield from f
    except OSError:
        return


def run_child(cmd: list[str], env: Optional[dict[str, str]] = None, stdout: Optional[TextIO] = None) -> int:
    """Run the CLI to its end: Ctrl-C reaches it from the terminal (it cancels cleanly), so it
    is ignored here; SIGTERM is passed on. A signal's death reads as 128+N, as from a shell.
    `stdout`: where its output (stdout and stderr) goes, else the terminal."""
    p = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.STDOUT if stdout else None)
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, lambda sig, _frame: p.send_signal(sig))
    try:
        rc = p.wait()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    return 128 - rc if rc < 0 else rc


def with_nodes_file(config: dict, cwd: Path) -> Optional[dict]:
    """The stack's config with `nodes` read from its `nodes_file` when it keeps the list there;
    None when that file cannot be read (then no node counts as undeclared)."""
    name = config.get(f"{PROJECT}:nodes_file")
    if not name or f"{PROJECT}:nodes" in config:
        return config
    try:
        nodes = (yaml.safe_load((cwd / name).read_text()) or {}).get("nodes")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return {**config, f"{PROJECT}:nodes": nodes if isinstance(nodes, list) else []}


def unreachable_hosts(events: Iterable[str]) -> list[str]:
    """Hosts that an engine event log's error diagnostics say could not be reached over SSH,
    in the order first seen."""
    out: list[str] = []
    for line in events:
        if "over SSH" not in line:  # most lines of a large run's log: not parsed
            continue
        try:
            diag = json.loads(line).get("diagnosticEvent") or {}
        except (ValueError, AttributeError):
            continue
        if diag.get("severity") == "error":
            out += [h for h in _UNREACHABLE.findall(diag.get("message") or "") if h not in out]
    return out


def forget_hints(stack: str, config: Optional[dict], hosts: list[str]) -> list[str]:
    """For each unreachable host the stack no longer declares, the command that forgets it
    (never for a host `make forget` would refuse as declared; none when `config` is None)."""
    if config is None:
        return []
    return [f"pending_hosts: {h} cannot be reached over SSH and stack {stack} no longer uses it; if its "
            f"machine is gone for good, forget its resources from the state (nothing is sent to any host):\n"
            f"  make forget STACK={stack} NODE={h}"
            for h in hosts if declared(config, h) is None]


if __name__ == "__main__":
    sys.exit(main())
