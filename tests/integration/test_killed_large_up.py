"""A large fleet's `up` saves its state once, at its end (PULUMI_SKIP_CHECKPOINTS, set by
`make up` through components/pending_hosts.py above LARGE_FLEET_NODES nodes); killed with
`kill -9` halfway, the next `up` converges with every resource recorded once and nothing on a
host applied twice, and the rollback still undoes the killed run's work, from what each
primitive kept on its host (components/providers/kept.py).

Hosts: the real File and CommandWithVerify primitives on a local shell behind test_forget's fake
ssh (a TEST DOUBLE of the network hop only), which logs every command it is sent.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import yaml

from components.pending_hosts import LARGE_FLEET_NODES
from tests.procs import processes
from tests.pulumi_cli import ROOT

from .test_forget import ADDR, STACK, Fleet

N = LARGE_FLEET_NODES + 1


def declare(f: Fleet) -> None:
    nodes = [{"name": f"n{i:03d}", "address": "127.0.0.1", "owner": "slurm"} for i in range(N)]
    f.proj.write_stack(STACK, yaml.safe_dump({"config": {
        "gpu-fleet:root": str(f.hosts), "gpu-fleet:hosts": {"controller": {"name": "ctl", "address": ADDR["ctl"]}},
        "gpu-fleet:nodes": nodes}}))


def up(f: Fleet, **popen) -> subprocess.Popen:
    """`make up STACK=t ARGS=--yes` as the Makefile runs it."""
    return subprocess.Popen([sys.executable, "-m", "components.pending_hosts", "up", STACK, "--cwd", str(f.proj.dir),
                             "--pulumi", "pulumi", "--", "--yes", "--skip-preview", "--parallel", "8"],
                            cwd=ROOT, env=f.proj.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, **popen)


def writes(f: Fleet) -> list[str]:
    """The mutating commands the fake ssh was sent (file writes, markers, kept records)."""
    if not f.log.exists():
        return []
    return [line for line in f.log.read_text().splitlines() if "file_write" in line or "echo up" in line
            or "gf-seq" in line]


def dynamic(f: Fleet) -> list[str]:
    state = json.loads(f.proj.run("stack", "export", "--stack", STACK).stdout)["deployment"]
    return [r["urn"] for r in state.get("resources") or [] if r["type"].startswith("pulumi-python:dynamic")]


def end_orphans(f: Fleet) -> None:
    """The language host starts outside the CLI's process group and outlives its kill: end it and
    its program (this test's, by the project path and the killed engine's address), by PID."""
    procs = processes()
    ours = [cmd for _, cmd in procs.values() if str(f.proj.dir) in cmd]
    engines = {m.group(1) for cmd in ours for m in [re.search(r"--engine (\S+)", cmd)] if m}
    for pid, (_, cmd) in procs.items():
        if pid != os.getpid() and (str(f.proj.dir) in cmd or any(e in cmd for e in engines)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_large_up_killed_halfway_is_adopted_by_the_next_and_rolled_back_whole(tmp_path):
    f = Fleet(tmp_path)
    declare(f)
    f.proj.init_stack(STACK, secrets=False)
    f.proj.env.pop("PULUMI_SKIP_CHECKPOINTS", None)  # the wrapper sets it for a large fleet

    p = up(f, start_new_session=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and p.poll() is None:
        made = list(f.hosts.glob("n*/marker"))
        if len(made) >= N // 2:
            break
        time.sleep(0.05)
    assert p.poll() is None, "the up ended before half the nodes were done: " + (p.stdout.read() or "")[-2000:]
    os.killpg(p.pid, signal.SIGKILL)  # the wrapper, the CLI and what stays in its process group
    p.wait()
    end_orphans(f)
    time.sleep(1)
    done_before = {m.parent.name for m in f.hosts.glob("n*/marker")}
    assert N // 2 <= len(done_before) < N
    assert dynamic(f) == []  # saved at the end only: the state knows nothing of the killed run
    kept = list((tmp_path / "kept").rglob("*.json"))
    assert len(kept) >= 2 * len(done_before)  # each node's File and marker kept what was there

    f.proj.run("cancel", "--yes", "--stack", STACK)
    f.clear_log()
    p = up(f)
    out = p.communicate(timeout=600)[0]
    assert p.returncode == 0, out[-4000:]
    assert "state is saved at the end of the run" in out
    again = f.log.read_text()
    for node in done_before:  # nothing the killed run finished is applied twice
        assert f"{f.hosts}/{node}/marker" not in "\n".join(w for w in again.splitlines() if "echo up" in w), node
    urns = dynamic(f)
    assert len(urns) == len(set(urns)) == 2 * N + 1  # every resource recorded once
    assert all((f.hosts / f"n{i:03d}" / "marker").exists() for i in range(N))

    # the rollback removes every node's work, the killed run's too, and leaves nothing kept
    f.proj.run("destroy", "--yes", "--stack", STACK, timeout=600)
    assert not list(f.hosts.glob("n*/marker")) and not list(f.hosts.glob("n*/etc/node.conf"))
    assert not (tmp_path / "kept").exists()
