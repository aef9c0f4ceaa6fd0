"""Benchmark: offline `pulumi preview` and a no-op `pulumi up` of generated fleets (issue 16).

Generates stacks of N nodes x 8 V100 (14, 140 and, with --big, 1,250), every node in the one
Slurm partition and otherwise like stacks/Pulumi.full.yaml (every node owned by slurm or free:
K3s-owned nodes in a partition are refused until the K3s retirement layer lands), in a temp
copy of the project, and measures with the real CLI:

- `pulumi preview` of the creates (no host is contacted: every resource is new, so the
  engine asks the providers only to check and diff, never to read or create);
- `pulumi up --skip-preview` of the same stack against a state that already holds every
  resource with the outputs its provider would record on a host that already matches (see
  FAKE HOSTS below), i.e. the diff-only no-op an admin's second `up` is;
- wall time, CPU seconds and peak RSS (VmHWM from /proc, polled) of the CLI, of the Python
  program and of the dynamic-provider process; resources and state bytes per node: the
  backend's file (the state as stored, compact JSON) and `pulumi stack export` (the same
  JSON indented, ~1.75x the bytes).

FAKE HOSTS. The state is written by the engine itself: a first `pulumi up --skip-preview`
in which the temp copy's host primitives (and only the copy's) answer create as a host that
already is in the desired state would: outputs = public inputs + desired state, which is
what `HostPrimitive.outputs` records after a converged apply; the GPU baseline reports every
node healthy; rollout checks record their inputs. Nothing reaches SSH (the copy's
`Connection.connect` and `.run` raise). That run goes without per-step checkpoints
(PULUMI_SKIP_CHECKPOINTS; --checkpointed-build keeps them, as a real first `up` would).
The measured no-op `up` then runs the real, unpatched `diff` of every provider against that
state. This is the simplest honest option: `pulumi stack import` of a hand-made state would
need the same per-kind outputs written by hand, and a fake ssh would need a host simulator
for every probe script. The outputs lack what only a real host adds (the packages an install
pulled in, a unit's properties), so the state figures are a lower bound.

NODES FILE. The language host hands the program the whole stack config in one environment
variable (PULUMI_CONFIG), and Linux refuses an exec with one string over 128 KiB: from about
660 nodes of this shape an inline node list does not start the program ("fork/exec
.venv/bin/python: argument list too long"). Above the limit (--nodes-file auto) the stack
names its node list in `gpu-fleet:nodes_file` (stacks/nodes.<stack>.yaml), as a user's large
stack does; the config stays a few KB.

KILL HALFWAY (--kill-halfway): the first `up` on the fake hosts is killed with SIGKILL (the CLI
and every process under it) once the engine's event log shows half its resources done, its lock
cleared with `pulumi cancel`, and `up` run again: the figures are when it was killed, what the
state then held (nothing without checkpoints), the second `up`'s time and peak memory, and
whether every resource is recorded once. The fake hosts answer every create as a host already
converged, so what a real host adopts (providers/kept.py) is tested elsewhere
(tests/integration/test_killed_large_up.py, tests/lab/test_interruptions.py).

LEVERS (--lever, --env, --parallel): changes tried in the temp copy only, to measure what a
code change would buy (LEVERS below; the results are in bench/README.md).

PROFILE (--profile): the program under cProfile (a `sitecustomize` on the program's
PYTHONPATH, active only in the program's interpreter) and the CLI under its own
`--profiling` (Go pprof, read with `go tool pprof`); the top functions of both are printed,
--profile-dir keeps the files.

    .venv/bin/python bench/scale.py [--nodes 14,140] [--big] [--env PULUMI_SKIP_CHECKPOINTS=true]
        [--lever NAME] [--policy] [--profile] [--no-up] [--keep-state DIR] [--timeout 900]
        [--kill-halfway] [--checkpointed-build]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import fleet14  # noqa: E402
from tests.pulumi_cli import PulumiProject  # noqa: E402

#: RFC 2544's benchmarking range: never a real host
NET = ipaddress.ip_network("198.18.0.0/15")


def fleet(n: int) -> dict:
    """The full stack's config with `n` nodes, all in the v100 partition; the first the canary."""
    raw = fleet14()  # without the committed stack's secrets: the temp stack generates its own
    proto = next(x for x in raw["gpu-fleet:nodes"] if x["owner"] == "slurm")
    hosts = list(NET.hosts())
    nodes = []
    for i in range(n):
        node = {**proto, "name": f"gpu{i + 1:04d}", "address": str(hosts[100 + i]),
                "owner": "free" if i % 2 else "slurm"}
        node.pop("canary", None)
        if i == 0:
            node["canary"] = True
        nodes.append(node)
    raw["gpu-fleet:nodes"] = nodes
    raw["gpu-fleet:slurm"]["partitions"] = [
        {**raw["gpu-fleet:slurm"]["partitions"][0], "nodes": [x["name"] for x in nodes]}]
    return raw


# ---- process tree accounting ---------------------------------------------------------------

ROLES = (("pulumi.dynamic", "provider"), ("components.provider_host", "provider"),
         ("pulumi-analyzer-policy", "policy"), ("pulumi_policy", "policy"), ("pulumi.policy", "policy"),
         ("-use-executor", "language host"), ("pulumi-language-python-exec", "program"))
TICK = os.sysconf("SC_CLK_TCK")


def role(pid: int, cli: int, cmd: str) -> str:
    if pid == cli:
        return "cli"
    for needle, name in ROLES:
        if needle in cmd:
            return name
    return "other"  # the language host's `pip list` and `python3 --version` at start-up


@dataclass
class Proc:
    role: str
    hwm_kib: int = 0
    cpu_s: float = 0.0
    cmd: str = ""


@dataclass
class Watch:
    """Polls /proc for the CLI and its descendants: peak RSS (VmHWM) and CPU time of each."""

    root: int
    procs: dict[int, Proc] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def _children(self) -> dict[int, list[int]]:
        kids: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                kids.setdefault(ppid, []).append(int(d))
        return kids

    def sample(self) -> None:
        kids = self._children()
        todo, seen = [self.root], []
        while todo:
            p = todo.pop()
            seen.append(p)
            todo += kids.get(p, [])
        for p in seen:
            try:
                status = Path(f"/proc/{p}/status").read_text()
                stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
            pr = self.procs.setdefault(p, Proc("other"))
            if cmd:  # empty until the exec
                pr.role, pr.cmd = role(p, self.root, cmd), cmd[:300]
            pr.hwm_kib = max(pr.hwm_kib, hwm)
            pr.cpu_s = max(pr.cpu_s, (int(stat[11]) + int(stat[12])) / TICK)

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(0.1)

    def by_role(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for p in self.procs.values():
            r = out.setdefault(p.role, {"rss_mib": 0.0, "cpu_s": 0.0, "n": 0})
            r["rss_mib"] = max(r["rss_mib"], round(p.hwm_kib / 1024, 1))
            r["cpu_s"] = round(r["cpu_s"] + p.cpu_s, 1)
            r["n"] += 1
        return out


def timed(proj: PulumiProject, *args: str, timeout: int) -> tuple[float, dict, subprocess.CompletedProcess]:
    """Run the CLI, watching its process tree; (wall s, per-role figures, the completed run)."""
    start = time.monotonic()
    p = subprocess.Popen(["pulumi", *args, "--non-interactive"], cwd=proj.dir, env=proj.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)  # its own process group: a timeout ends all of it
    w = Watch(p.pid)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        w.stop.set()
        t.join()
        raise AssertionError(f"pulumi {' '.join(args)}: timed out after {timeout} s; "
                             + figures(w.by_role())) from e
    finally:
        w.stop.set()
        t.join()
    wall = time.monotonic() - start
    done = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    if p.returncode != 0:
        raise AssertionError(f"pulumi {' '.join(args)} exited {p.returncode}\n--- stdout\n{out[-4000:]}"
                             f"\n--- stderr\n{err[-4000:]}")
    return wall, w.by_role(), done


# ---- the temp project ----------------------------------------------------------------------

FAKE_HOSTS = '''
# bench/scale.py: FAKE HOSTS, only in this temp copy (see the bench's docstring)
import os as _os
if _os.environ.get("GPU_FLEET_BENCH_FAKE_HOSTS") == "1":
    from . import _bench_fake_hosts  # noqa: F401
'''

#: Linux's limit on one environment string (MAX_ARG_STRLEN, 32 pages): the language host hands
#: the program the whole stack config as one variable, PULUMI_CONFIG=<JSON>, and exec fails
#: with E2BIG ("argument list too long") beyond it
MAX_ARG_STRLEN = 32 * 4096


def config_env_bytes(cfg: dict) -> int:
    """About what PULUMI_CONFIG=... takes for this config (structured values as JSON strings)."""
    return len("PULUMI_CONFIG=") + len(json.dumps(
        {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":")) for k, v in cfg.items()},
        separators=(",", ":")))

FAKE_MODULE = '''
"""bench/scale.py's fake hosts: every host already is what the stack declares."""
import importlib as _importlib
import pkgutil as _pkgutil

from . import providers as _providers  # noqa: F401  (every primitive, so every subclass below)
from . import layers as _layers
for _m in _pkgutil.walk_packages(_layers.__path__, _layers.__name__ + "."):  # every layer's kinds too
    _importlib.import_module(_m.name)
from .layers.gpu_runtime import component as _gpu
from .providers import base as _base
from .providers import parts as _parts


from .transport import ssh as _ssh


def _no_ssh(*a, **k):
    raise RuntimeError("bench/scale.py: fake hosts: no SSH connection may be opened")


_base.connection = _no_ssh
_ssh.Connection.connect = _ssh.Connection.run = _no_ssh


def _converged(self, props):
    """What HostPrimitive.outputs records after an apply whose host showed the desired state."""
    desired = self.desired(props)
    public = self.public_inputs(props)
    shadowed = {k: public[k] for k in desired if public.get(k) is not None}
    return {**public, **desired, _parts.INPUTS: shadowed}


def _create(self, props):
    props = _parts.normalize(props)
    return _base.CreateResult(id_=f"{props['conn']['name']}:{self.key(props)}", outs=self._bench_outs(props))


def _update(self, _id, olds, news):
    return _base.UpdateResult(outs=self._bench_outs(_parts.normalize(news)))


def _subclasses(cls):
    yield cls
    for c in cls.__subclasses__():
        yield from _subclasses(c)


for _cls in _subclasses(_base.HostPrimitive):
    _cls.create, _cls.update, _cls._bench_outs = _create, _update, _converged
for _cls in _subclasses(_base.RolloutCheck):
    _cls.create, _cls.update, _cls._bench_outs = _create, _update, lambda self, props: dict(props)


def _baseline(self, props, refresh=False):
    names = [n["name"] for n in props["nodes"]]
    return {**_gpu.inputs_of(props), "verdicts": {n: {"verdict": "ok", "reasons": []} for n in names},
            "healthy_nodes": names, "failed_nodes": [], "pending_nodes": list(props.get("pending") or []),
            "unknown_nodes": [], "problems": [], "summary": f"{len(names)} ok"}


_gpu.GpuBaselineProvider.run = _baseline
'''

PROFILE_HOOK = '''
# bench/scale.py --profile: the program's interpreter (not pip's, not the provider's) under cProfile
import atexit, cProfile, os, sys
if os.environ.get("GPU_FLEET_BENCH_PROFILE") and sys.argv and sys.argv[0].endswith("pulumi-language-python-exec"):
    _prof = cProfile.Profile()
    _prof.enable()
    atexit.register(lambda: (_prof.disable(), _prof.dump_stats(os.environ["GPU_FLEET_BENCH_PROFILE"])))
# and the policy pack's: its gRPC threads serve Analyze, so each call runs under the profiler (one
# at a time: engine._one_call, which wraps every call, is wrapped); the CLI ends the process
# without a clean exit, so the profile is written every 2 s, to <profile>.policy
elif os.environ.get("GPU_FLEET_BENCH_PROFILE") and any("policies" in a for a in sys.argv):
    import threading, time
    _pprof, _plock = cProfile.Profile(), threading.Lock()

    import contextlib

    def _watch():
        while True:
            eng = sys.modules.get("gpu_fleet_policies.engine")
            if eng is not None and hasattr(eng, "_one_call"):
                break
            time.sleep(0.005)
        inner = eng._one_call

        @contextlib.contextmanager
        def _profiled_call():  # the pack's Analyze and AnalyzeStack each run inside one of these
            with _plock, inner():
                _pprof.enable()
                try:
                    yield
                finally:
                    _pprof.disable()
        eng._one_call = _profiled_call
        while True:
            time.sleep(2)
            with _plock:
                _pprof.dump_stats(os.environ["GPU_FLEET_BENCH_PROFILE"] + ".policy")
    threading.Thread(target=_watch, daemon=True).start()
'''


#: program-side levers, tried in the temp copy only (prepended to its __main__.py); what each
#: would be as a code change is in bench/README.md. Since issue 16 item 2, quiet-log (for
#: registration's lines), no-stack-trace, plain-provider and a linear drain are in the code
#: (components/sdk.py, the providers): these stay to re-measure them on a tree without it
LEVERS = {
    # the SDK sends every debug line ("registering resource ...", ~4 a resource) as a blocking
    # gRPC call from the event loop
    "quiet-log": "import pulumi.log as _l\n_l.debug = lambda *a, **k: None\n",
    # the SDK records each resource's Python stack (~1.4 KB of state a resource), walking
    # traceback.extract_stack twice a registration
    "no-stack-trace": ("import pulumi.runtime.resource as _r\nfrom pulumi.runtime.proto import source_pb2 as _s\n"
                       "_r._get_stack_trace = lambda: _s.StackTrace()\n"),
    # dynamic providers serialized in the clear (none of ours captures a secret: the MUNGE
    # key is an input, and inputs stay secret on their own)
    "plain-provider": "import pulumi.dynamic as _d\n_d.ResourceProvider.serialize_as_secret_always = False\n",
    # the SDK's end-of-program drain (pulumi/runtime/stack.py wait_for_rpcs) waits for the FIRST
    # of all pending Outputs to complete, again and again: O(pending) a wake-up. Waiting for all
    # of them at once shows what that costs (an SDK change, not ours: it would also hold back a
    # failed Output's error until the others finished)
    "drain-all": """import asyncio as _a
import pulumi.runtime.stack as _st
from pulumi.runtime.settings import SETTINGS as _S
_orig_wait = _a.wait
async def _wait_all(fs, *, timeout=None, return_when=_a.ALL_COMPLETED):
    return await _orig_wait(fs, timeout=timeout, return_when=_a.ALL_COMPLETED)
class _A:
    def __getattr__(self, k):
        return _wait_all if k == "wait" else getattr(_a, k)
_st.asyncio = _A()
""",
}


def project(tmp: Path, stack: str, n: int, profile: bool, levers: list[str],
            nodes_file: bool) -> PulumiProject:
    proj = PulumiProject.copy_of(tmp, [ROOT / "Pulumi.yaml", ROOT / "__main__.py", ROOT / "components",
                                       ROOT / "policies"])
    init = proj.dir / "components" / "__init__.py"
    init.write_text(init.read_text() + FAKE_HOSTS)
    (proj.dir / "components" / "_bench_fake_hosts.py").write_text(FAKE_MODULE)
    if levers:
        main = proj.dir / "__main__.py"
        main.write_text("".join(LEVERS[x] for x in levers) + main.read_text())
    # File(by_hash=True)'s rendered texts: in the temp dir, not the user's cache
    proj.env["GPU_FLEET_STORE_DIR"] = str(tmp / "store")
    cfg = fleet(n)
    if nodes_file:
        # NODES FILE: the node list in the file the stack names (gpu-fleet:nodes_file)
        (proj.dir / "stacks" / f"nodes.{stack}.yaml").write_text(
            yaml.safe_dump({"nodes": cfg.pop("gpu-fleet:nodes")}, sort_keys=False, width=200))
        cfg["gpu-fleet:nodes_file"] = f"stacks/nodes.{stack}.yaml"
    proj.write_stack(stack, yaml.safe_dump({"config": cfg}, sort_keys=False, width=200))
    if profile:
        hook = tmp / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(PROFILE_HOOK)
        proj.env["PYTHONPATH"] = f"{hook}:{proj.env.get('PYTHONPATH', '')}".rstrip(":")
    proj.init_stack(stack)
    return proj


def top(path: Path, n: int = 25) -> str:
    import io
    buf = io.StringIO()
    st = pstats.Stats(str(path), stream=buf)
    st.sort_stats("cumulative").print_stats(n)
    st.sort_stats("tottime").print_stats(n)
    return buf.getvalue()


def pprof(prefix: Path, n: int = 22) -> str:
    """The CLI's own CPU profile (`--profiling`), top functions by flat and by cumulative time."""
    cpu = sorted(prefix.parent.glob(prefix.name + ".*.cpu"))
    if not cpu:
        return "(no CLI profile written)"
    binary = Path(subprocess.run(["readlink", "-f", str(ROOT / ".tools" / "bin" / "pulumi")],
                                 capture_output=True, text=True).stdout.strip())
    out = []
    for flag in ("-top", "-top -cum"):
        p = subprocess.run(["go", "tool", "pprof", *flag.split(), f"-nodecount={n}", str(binary), str(cpu[-1])],
                           capture_output=True, text=True)
        out.append(p.stdout or p.stderr)
    return "\n".join(out)


def figures(roles: dict) -> str:
    return ", ".join(f"{k} {v['rss_mib']:.0f} MiB peak / {v['cpu_s']} s cpu"
                     for k, v in sorted(roles.items()) if k in ("cli", "program", "provider", "policy"))


def show_profiles(tmp: Path, what: str, keep: Path | None) -> None:
    if keep:  # for pstats / `go tool pprof` by hand
        keep.mkdir(parents=True, exist_ok=True)
        for f in [*tmp.glob(f"cli-{what}.*"), *tmp.glob(f"{what}.prof*")]:
            shutil.copy(f, keep / f"{tmp.name.split('-')[0]}-{f.name}")
    print(pprof(tmp / f"cli-{what}"))
    if (tmp / f"{what}.prof").exists():
        print(top(tmp / f"{what}.prof"))
    if (tmp / f"{what}.prof.policy").exists():
        print("the policy pack's process:")
        print(top(tmp / f"{what}.prof.policy"))


def killed_halfway(proj: PulumiProject, stack: str, opts: list[str], total: Optional[int], timeout: int,
                   tmp: Path) -> dict:
    """KILL HALFWAY: the first `up` (fake hosts, as the environment says) killed with SIGKILL, the
    CLI and every process under it, once the engine's event log shows half the resources done;
    then the killed run's lock cleared (`pulumi cancel`, as `make up` says to). Returns when it
    was killed and what the state held after it."""
    log = tmp / "killed-events.jsonl"
    env = {**proj.env, "PULUMI_DEBUG_COMMANDS": "true"}
    start = time.monotonic()
    p = subprocess.Popen(["pulumi", "up", "--yes", "--skip-preview", "--non-interactive", "--stack", stack, *opts,
                          "--event-log", str(log)], cwd=proj.dir, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    w = Watch(p.pid)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    half = (total or 2) // 2
    done = 0
    while p.poll() is None and time.monotonic() - start < timeout:
        done = log.read_text(errors="replace").count('"resOutputsEvent"') if log.exists() else 0
        if done >= half:
            break
        time.sleep(0.2)
    if p.poll() is not None:
        raise AssertionError(f"the first up ended (exit {p.returncode}) before half its resources were done")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    w.stop.set()
    t.join()
    killed_at = time.monotonic() - start
    proj.run("cancel", "--yes", "--stack", stack)
    state = json.loads(proj.run("stack", "export", "--stack", stack).stdout)["deployment"]
    held = len(state.get("resources") or [])
    print(f"  {stack}: first up killed (SIGKILL) after {killed_at:.1f} s at {done} of {total} resources done; "
          f"the state then held {held} resources; {figures(w.by_role())}", flush=True)
    return {"killed_at_s": round(killed_at, 1), "killed_done": done, "killed_state_resources": held,
            "killed": w.by_role()}


def bench(n: int, args: argparse.Namespace) -> dict:
    stack = f"scale{n}"
    with tempfile.TemporaryDirectory(prefix=f"scale{n}-") as d:
        tmp = Path(d)
        env_bytes = config_env_bytes(fleet(n))
        side = env_bytes > MAX_ARG_STRLEN if args.nodes_file == "auto" else args.nodes_file == "always"
        print(f"  {n} nodes: stack config as PULUMI_CONFIG {env_bytes / 1024:.0f} KiB (limit "
              f"{MAX_ARG_STRLEN // 1024} KiB){'; the node list in gpu-fleet:nodes_file' if side else ''}",
              flush=True)
        proj = project(tmp, stack, n, args.profile, args.lever, side)
        proj.env.update(args.env)
        opts = [*(["--policy-pack", "policies"] if args.policy else []),
                *([f"--parallel={args.parallel}"] if args.parallel else [])]

        def cli(what: str, *argv: str) -> tuple[float, dict, subprocess.CompletedProcess]:
            prof = ["--profiling", str(tmp / f"cli-{what}")] if args.profile else []
            proj.env["GPU_FLEET_BENCH_PROFILE"] = str(tmp / f"{what}.prof")
            return timed(proj, *argv, "--stack", stack, *opts, *prof, timeout=args.timeout)

        r: dict = {"nodes": n, "levers": args.lever, "env": args.env, "config_env_bytes": env_bytes,
                   "nodes_file": side}
        try:
            wall, roles, done = cli("preview", "preview")
        except AssertionError as e:  # a timeout: the row says so
            print(f"  {n} nodes: preview failed: {str(e)[:300]}", flush=True)
            return {**r, "preview_s": None, "error": str(e)[:300]}
        m = re.search(r"\+ (\d+) to create", done.stdout)
        r.update(resources=int(m.group(1)) if m else None, preview_s=round(wall, 1), preview=roles)
        print(f"  {n} nodes: preview {wall:.1f} s, {r['resources']} resources to create; {figures(roles)}",
              flush=True)
        if args.profile:
            show_profiles(tmp, "preview", args.profile_dir)
        if args.no_up:
            return r

        # the state, written by the engine through the fake hosts; without checkpoints (the
        # engine then serializes the state once, not after every step: see README)
        proj.env.update(GPU_FLEET_BENCH_FAKE_HOSTS="1", PULUMI_SKIP_CHECKPOINTS="true")
        if args.checkpointed_build:  # as a real first `up` records it: the state after every step
            del proj.env["PULUMI_SKIP_CHECKPOINTS"]
        if args.kill_halfway:  # KILL HALFWAY: that first up killed at half its resources, then again
            r.update(killed_halfway(proj, stack, opts, r["resources"], args.timeout, tmp))
        wall_c, roles_c, _ = timed(proj, "up", "--yes", "--skip-preview", "--stack", stack, *opts,
                                   timeout=args.timeout)
        for k in ("GPU_FLEET_BENCH_FAKE_HOSTS", "PULUMI_SKIP_CHECKPOINTS"):
            proj.env.pop(k, None)
        proj.env.update(args.env)
        state = proj.run("stack", "export", "--stack", stack, timeout=args.timeout).stdout
        res = json.loads(state)["deployment"]["resources"]
        if args.keep_state:  # for reading by hand: what a resource of each kind holds
            args.keep_state.mkdir(parents=True, exist_ok=True)
            (args.keep_state / f"{stack}.json").write_text(state)
        by_type: dict[str, list[int]] = {}
        for x in res:
            by_type.setdefault(x["type"].rsplit(":", 1)[-1], []).append(len(json.dumps(x)))
        trace = sum(len(json.dumps(x.get("stackTrace", ""))) for x in res)
        disk = sum(f.stat().st_size for f in (tmp / "backend").rglob(f"{stack}.json*") if f.is_file()
                   and ".bak" not in f.name)
        written = 'checkpointed' if args.checkpointed_build else 'no checkpoints'
        print(f"  {n} nodes: state written (fake hosts, {written}) "
              f"in {wall_c:.1f} s (CLI {roles_c.get('cli', {}).get('rss_mib', 0):.0f} MiB peak): "
              f"{len(state) / 1024:.0f} KB, {len(state) / n / 1024:.1f} KB/node, "
              f"{len(res)} resources; the backend's file {disk / 1024:.0f} KB; stackTrace fields {trace / 1024:.0f} KB",
              flush=True)
        for kind, sizes in sorted(by_type.items(), key=lambda kv: -sum(kv[1]))[:8]:
            print(f"    {kind}: {len(sizes)} x {sum(sizes) / len(sizes) / 1024:.1f} KB = {sum(sizes) / 1024:.0f} KB")

        if args.kill_halfway:
            urns = [x["urn"] for x in res]
            r.update(recorded_once=len(urns) == len(set(urns)), recovered_resources=len(urns))
            print(f"  {n} nodes: after the kill, the next up {wall_c:.1f} s: {len(urns)} resources recorded, "
                  f"{'each once' if r['recorded_once'] else 'SOME TWICE'}", flush=True)
        wall_u, roles_u, _ = cli("up", "up", "--yes", "--skip-preview", "--expect-no-changes")
        print(f"  {n} nodes: no-op up --skip-preview {wall_u:.1f} s; {figures(roles_u)}", flush=True)
        if args.profile:
            show_profiles(tmp, "up", args.profile_dir)
        r.update(state_build_s=round(wall_c, 1), state_build=roles_c, up_s=round(wall_u, 1), up=roles_u,
                 state_bytes=len(state),
                 state_kb_per_node=round(len(state) / n / 1024, 1), state_resources=len(res),
                 state_file_kb_per_node=round(disk / n / 1024, 1),
                 state_stack_trace_bytes=trace, state_file_bytes=disk,
                 state_by_type={k: [len(v), sum(v)] for k, v in by_type.items()})
        return r


def first_up(r: dict) -> str:
    """The first up's time and the sum of its processes' peaks (an upper bound on its peak);
    after a kill, the second up's, with the killed run's time."""
    if "state_build_s" not in r:
        return "-"
    peak = sum(v["rss_mib"] for v in r["state_build"].values())
    killed = f", after a kill at {r['killed_at_s']} s" if "killed_at_s" in r else ""
    return f"{r['state_build_s']} ({peak:.0f}{killed})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="14,140", help="comma-separated fleet sizes")
    ap.add_argument("--big", action="store_true", help="also 1,250 nodes (slow on 2 cores)")
    ap.add_argument("--policy", action="store_true", help="under the policy pack, as `make preview`")
    ap.add_argument("--profile", action="store_true", help="the program under cProfile")
    ap.add_argument("--profile-dir", type=Path, help="with --profile: keep the profiles here")
    ap.add_argument("--checkpointed-build", action="store_true",
                    help="write the state as a real first `up` does, a checkpoint after every step (slow)")
    ap.add_argument("--kill-halfway", action="store_true",
                    help="kill -9 the first up at half its resources, then up again (KILL HALFWAY)")
    ap.add_argument("--nodes-file", choices=("auto", "always", "never"), default="auto",
                    help="the node list in gpu-fleet:nodes_file (auto: when PULUMI_CONFIG would pass the limit)")
    ap.add_argument("--no-up", action="store_true", help="preview only")
    ap.add_argument("--keep-state", type=Path, help="write each stack's exported state here")
    ap.add_argument("--timeout", type=int, default=900, help="per CLI command, seconds")
    ap.add_argument("--lever", action="append", default=[], choices=sorted(LEVERS),
                    help="try a program-side change in the temp copy (repeatable)")
    ap.add_argument("--env", action="append", default=[], metavar="K=V",
                    help="environment for the measured CLI runs, e.g. PULUMI_SKIP_CHECKPOINTS=true")
    ap.add_argument("--parallel", type=int, help="the engine's --parallel (default: the CLI's)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    args.env = dict(e.split("=", 1) for e in args.env)
    sizes = [int(x) for x in args.nodes.split(",")] + ([1250] if args.big else [])
    rows = []
    for n in sizes:
        rows.append(bench(n, args))
    base = next((r for r in rows if r.get("preview_s")), None)
    print(f"\nlevers: {', '.join(args.lever) or 'none'}; env: {args.env or 'none'}"
          f"{'; policy pack' if args.policy else ''}{f'; --parallel={args.parallel}' if args.parallel else ''}")
    print("| nodes | resources | res/node | preview s | s/node | time / first (nodes / first) "
          "| peak RSS CLI / program MiB | CPU s CLI / program | first up s (peak RSS, all processes, MiB) "
          "| no-op up s | state KB/node: backend file (export) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not r.get("preview_s"):
            print(f"| {r['nodes']} | - | - | {r.get('error', 'failed')[:60]} | | | | | | |")
            continue
        assert base is not None  # r itself has a preview time
        pv = r["preview"]
        cli, prog = pv.get("cli", {}), pv.get("program", {})
        print(f"| {r['nodes']} | {r['resources']} | {r['resources'] / r['nodes']:.1f} | {r['preview_s']} "
              f"| {r['preview_s'] / r['nodes']:.3f} | {r['preview_s'] / base['preview_s']:.1f} "
              f"({r['nodes'] / base['nodes']:.0f}) "
              f"| {cli.get('rss_mib', 0):.0f} / {prog.get('rss_mib', 0):.0f} "
              f"| {cli.get('cpu_s', 0)} / {prog.get('cpu_s', 0)} "
              f"| {first_up(r)} | {r.get('up_s', '-')} "
              f"| {r.get('state_file_kb_per_node', '-')} ({r.get('state_kb_per_node', '-')}) |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
