"""`python -m components.forget`: a dead host's resources forgotten from state with the real CLI.

The program (fixtures/forget_program) declares the real File and CommandWithVerify primitives
on three hosts that are a local shell behind a fake ssh (fixtures/fakessh/ssh: a TEST DOUBLE
of the network hop; an address listed in $FAKESSH_DEAD answers like a machine that is gone,
and every invocation is logged, so "nothing was sent to a host" is checked, not assumed).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.pulumi_cli import ROOT, PulumiProject

FIX = ROOT / "tests" / "integration" / "fixtures"
STACK = "t"
ADDR = {"node1": "127.0.0.1", "node2": "127.0.0.2", "ctl": "127.0.0.3"}


class Fleet:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.proj = PulumiProject.copy_of(tmp, [FIX / "forget_program" / "Pulumi.yaml",
                                                FIX / "forget_program" / "__main__.py", ROOT / "components"])
        self.log, self.dead = tmp / "ssh.log", tmp / "dead"
        self.proj.env.update(PATH=f"{FIX / 'fakessh'}:{self.proj.env['PATH']}", FAKESSH_LOG=str(self.log),
                             FAKESSH_DEAD=str(self.dead))
        self.hosts = tmp / "hosts"

    def declare(self, node2: str | None = "slurm") -> None:
        nodes = [{"name": "node1", "address": ADDR["node1"], "owner": "slurm"}]
        if node2:
            nodes.append({"name": "node2", "address": ADDR["node2"], "owner": node2})
        self.proj.write_stack(STACK, yaml.safe_dump({"config": {
            "gpu-fleet:root": str(self.hosts),
            "gpu-fleet:hosts": {"controller": {"name": "ctl", "address": ADDR["ctl"]}},
            "gpu-fleet:nodes": nodes}}))

    def up(self, *args: str) -> str:
        return self.proj.run("up", "--stack", STACK, "--yes", "--skip-preview", *args).stdout

    def urns(self) -> list[str]:
        state = json.loads(self.proj.run("stack", "export", "--stack", STACK).stdout)
        return [r["urn"] for r in state["deployment"]["resources"]]

    def forget(self, host: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "components.forget", STACK, host, "--cwd", str(self.proj.dir),
                               *args], cwd=ROOT, env=self.proj.env, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)

    def sent_to(self) -> list[str]:
        """Addresses ssh was asked to reach since the log was last cleared."""
        return [line.split(" ", 1)[0] for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def clear_log(self) -> None:
        self.log.write_text("")


def urn(name: str, kind: str) -> str:
    return f"urn:pulumi:{STACK}::gpu-fleet::pulumi-python:dynamic/host:{kind}::{name}"


NODE2 = [urn("node2-conf", "File"), urn("node2-marker", "CommandWithVerify")]
KEPT = [urn("node1-conf", "File"), urn("node1-marker", "CommandWithVerify"),
        urn("ctl-reconfigure", "CommandWithVerify")]


@pytest.fixture
def fleet(tmp_path) -> Fleet:
    f = Fleet(tmp_path)
    f.declare()
    f.proj.init_stack(STACK, secrets=False)
    f.up()
    assert set(NODE2 + KEPT) <= set(f.urns())
    assert (f.hosts / "node2" / "marker").exists()
    return f


def test_a_host_the_stack_still_declares_is_refused(fleet):
    before = fleet.urns()
    fleet.clear_log()
    p = fleet.forget("node2", "--yes")
    assert p.returncode == 1
    assert ("refusing to forget node2: " in p.stdout and "gpu-fleet:nodes[1] declares it with owner 'slurm'" in p.stdout
            and "the next `up` would recreate them on node2" in p.stdout and "owner: unreachable" in p.stdout)
    p = fleet.forget("ctl", "--yes")
    assert p.returncode == 1 and "it is the stack's controller host (gpu-fleet:hosts.controller)" in p.stdout
    assert fleet.urns() == before and fleet.sent_to() == []


def test_a_dead_node_is_forgotten_and_the_rest_of_the_fleet_converges(fleet):
    # node2's machine is gone for good; the stack marks it unreachable (the program drops it)
    fleet.dead.write_text(ADDR["node2"] + "\n")
    fleet.declare(node2="unreachable")
    before = fleet.urns()
    fleet.clear_log()

    # the controller's resource still records a dependency on node2's: blocked, with the way out
    p = fleet.forget("node2", "--yes")
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"  {urn('ctl-reconfigure', 'CommandWithVerify')} (on ctl) depends on {NODE2[1]}" in p.stdout
    [cmd] = [line.strip() for line in p.stdout.splitlines() if line.strip().startswith("bin/pulumi up ")]
    assert all(f"--exclude {shlex.quote(u)}" in cmd for u in NODE2)
    assert fleet.urns() == before and fleet.sent_to() == []

    # that up, as printed: the rest of the fleet re-recorded without node2, node2 never contacted
    argv = shlex.split(cmd)[1:]
    fleet.proj.run(*[a for a in argv if a not in ("--policy-pack", "policies")], "--yes", "--skip-preview")
    assert ADDR["node2"] not in fleet.sent_to() and ADDR["ctl"] in fleet.sent_to()
    assert (fleet.hosts / "ctl" / "nodes").read_text() == "node1\n"

    # without --yes and without a terminal: listed, nothing forgotten
    p = fleet.forget("node2")
    assert p.returncode == 1 and "nothing forgotten: run again with --yes" in p.stdout
    assert all(u in p.stdout for u in NODE2) and set(NODE2) <= set(fleet.urns())

    fleet.clear_log()
    p = fleet.forget("node2", "--yes")
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "forgot 2 resource(s) of node2 from stack t:" in out
    for u in NODE2:
        assert f"  forgot {u}\n" in out  # each URN named as it goes
    # dependents first: the marker depends on the conf
    assert out.index(f"forgot {NODE2[1]}") < out.index(f"forgot {NODE2[0]}")
    left = fleet.urns()
    assert not set(NODE2) & set(left) and set(KEPT) <= set(left)
    assert fleet.sent_to() == []  # forget touches no host
    assert (fleet.hosts / "node2" / "marker").exists()  # what was on node2 stays there

    # the next up converges with nothing to do and contacts no dead host
    assert "unchanged" in fleet.up()
    fleet.proj.run("preview", "--stack", STACK, "--expect-no-changes")
    assert ADDR["node2"] not in fleet.sent_to()

    # forgetting again: nothing recorded, nothing done
    p = fleet.forget("node2", "--yes")
    assert p.returncode == 0 and "records no resource on node2: nothing to forget" in p.stdout


def test_a_node_removed_from_the_stack_after_a_failed_up_is_forgotten(fleet):
    """The other way out of the block: a plain up with the node gone from the stack records the
    others without it (its own deletes fail on the dead host), then forget."""
    fleet.dead.write_text(ADDR["node2"] + "\n")
    fleet.declare(node2=None)
    # as `make up` runs it: the error names the way out, with the stack and the node
    p = subprocess.run([sys.executable, "-m", "components.pending_hosts", "up", STACK, "--cwd", str(fleet.proj.dir),
                        "--pulumi", "pulumi", "--", "--yes", "--skip-preview", "--non-interactive"],
                       cwd=ROOT, env=fleet.proj.env,
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode != 0 and "cannot reach 127.0.0.2:22 over SSH" in p.stdout + p.stderr
    assert p.stderr.endswith(f"\n  make forget STACK={STACK} NODE=node2\n"), p.stderr
    assert set(NODE2) <= set(fleet.urns())
    p = fleet.forget("node2", "--yes")
    assert p.returncode == 0, p.stdout + p.stderr
    assert not set(NODE2) & set(fleet.urns())
    assert "unchanged" in fleet.up()
