"""`make preview|up` print the operator's view (components/run_summary.py) through
`python -m components.pending_hosts` with the real CLI and its real event log.

Hosts: the real File and CommandWithVerify primitives on a local shell behind the fake ssh of
test_forget (a TEST DOUBLE of the network hop only). The policy case runs the policy pack's own
fixture program (tests/policy/programs/fixtures) under the real pack.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from components.pending_hosts import LARGE_FLEET_NODES as SUMMARY_NODES
from tests.pulumi_cli import ROOT, PulumiProject

from .test_forget import ADDR, STACK, Fleet

POLICY_PROGRAM = ROOT / "tests" / "policy" / "programs" / "fixtures"


def op(proj: PulumiProject, *args: str, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    """As `make <op>` runs it (the Makefile's OP); `args` holds the `--` before the CLI's own."""
    i = args.index("--")
    return subprocess.run([sys.executable, "-m", "components.pending_hosts", *args[:i], "--cwd", str(proj.dir),
                           "--pulumi", "pulumi", *args[i:]], cwd=ROOT, env=proj.env, capture_output=True, text=True,
                          timeout=300, stdin=stdin)


def table(out: str) -> dict[str, list[str]]:
    """The summary's rows by their first cell (the header under 'layer')."""
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0] in ("layer", "total", "(outside", "providers"):
            rows[" ".join(cells[:2]) if cells[0] == "(outside" else cells[0]] = cells
    return rows


def run_log(proj: PulumiProject, out: str) -> Path:
    [line] = [x for x in out.splitlines() if x.startswith("the CLI's own output (every resource): ")]
    return proj.dir / line.split(": ", 1)[1]


def test_an_up_prints_a_summary_and_keeps_the_clis_lines_in_a_private_log(tmp_path):
    f = Fleet(tmp_path)
    f.declare()
    f.proj.init_stack(STACK, secrets=False)
    p = op(f.proj, "up", STACK, "--view", "summary", "--", "--yes", "--skip-preview")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = table(p.stdout)
    # 2 nodes x (File, CommandWithVerify) + the controller's: 5 creates on 3 hosts
    assert rows["layer"] == ["layer", "create", "hosts", "changed"]
    assert rows["(outside Fleet)"][2:] == ["5", "3"], p.stdout
    assert p.stdout.splitlines()[1].startswith(f"up of stack {STACK}: succeeded in ")
    log = run_log(f.proj, p.stdout)
    assert log.stat().st_mode & 0o077 == 0  # private, like the state
    text = log.read_text()
    for name in ("node1-conf", "node1-marker", "node2-conf", "node2-marker", "ctl-reconfigure"):
        assert name in text and name not in p.stdout  # one line each there, none here
    assert (f.hosts / "node2" / "marker").exists()

    # nothing changed: the same table says so, with no host changed
    p = op(f.proj, "up", STACK, "--view", "summary", "--", "--yes", "--skip-preview")
    assert p.returncode == 0, p.stdout + p.stderr
    assert table(p.stdout)["(outside Fleet)"][2:] == ["5", "0"] and table(p.stdout)["layer"][1] == "same"


def test_a_failed_up_names_the_failed_resources_and_the_error(tmp_path):
    f = Fleet(tmp_path)
    f.declare()
    f.proj.init_stack(STACK, secrets=False)
    f.dead.write_text(ADDR["node2"] + "\n")
    p = op(f.proj, "up", STACK, "--view", "summary", "--", "--yes", "--skip-preview")
    assert p.returncode != 0
    cells = table(p.stdout)
    assert "failed" in cells["layer"], p.stdout
    assert cells["total"][cells["layer"].index("failed")] == "1", p.stdout  # node2-conf; the rest never began
    assert "cannot reach 127.0.0.2:22 over SSH" in p.stdout
    assert p.stdout.splitlines()[1].startswith(f"up of stack {STACK}: failed")
    assert "up failed (exit " in p.stderr  # and the CLI's last lines


def test_an_up_that_would_ask_previews_as_a_summary_and_without_a_terminal_applies_nothing(tmp_path):
    f = Fleet(tmp_path)
    f.declare()
    f.proj.init_stack(STACK, secrets=False)
    p = op(f.proj, "up", STACK, "--view", "summary", "--")
    assert p.returncode == 1
    assert p.stdout.splitlines()[0].startswith(f"preview of stack {STACK}: the CLI's output goes to .state/runs/")
    assert table(p.stdout)["(outside Fleet)"][2:] == ["5", "3"]
    assert "pass --yes (ARGS=--yes) to apply without a terminal" in p.stderr
    assert not (f.hosts / "node1").exists() and f.sent_to() == []
    state = json.loads(f.proj.run("stack", "export", "--stack", STACK).stdout)
    assert not state["deployment"].get("resources")  # no resource recorded


def test_a_stack_above_the_threshold_gets_the_summary_unasked(tmp_path):
    f = Fleet(tmp_path)
    nodes = [{"name": f"n{i:03d}", "address": "127.0.0.1", "owner": "slurm"} for i in range(SUMMARY_NODES + 1)]
    f.proj.write_stack(STACK, yaml.safe_dump({"config": {
        "gpu-fleet:root": str(f.hosts), "gpu-fleet:hosts": {"controller": {"name": "ctl", "address": ADDR["ctl"]}},
        "gpu-fleet:nodes": nodes}}))
    f.proj.init_stack(STACK, secrets=False)
    p = op(f.proj, "preview", STACK, "--")
    assert p.returncode == 0, p.stdout + p.stderr
    total = 2 * len(nodes) + 1
    assert table(p.stdout)["(outside Fleet)"][2:] == [str(total), str(len(nodes) + 1)]
    assert p.stdout.count("\n") < 20 and f.sent_to() == []
    # at the threshold, the CLI's own lines
    f.proj.write_stack(STACK, yaml.safe_dump({"config": {
        "gpu-fleet:root": str(f.hosts), "gpu-fleet:hosts": {"controller": {"name": "ctl", "address": ADDR["ctl"]}},
        "gpu-fleet:nodes": nodes[:SUMMARY_NODES]}}))
    p = op(f.proj, "preview", STACK, "--")
    assert p.returncode == 0 and "n000-marker" in p.stdout and "the CLI's own output" not in p.stdout


def test_a_policy_violation_is_printed_in_full(tmp_path):
    proj = PulumiProject.copy_of(tmp_path, [POLICY_PROGRAM / "Pulumi.yaml", POLICY_PROGRAM / "__main__.py",
                                            ROOT / "components", ROOT / "policies"])
    proj.init_stack("root-jobs")
    proj.run("config", "set", "--stack", "root-jobs", "policy-fixtures:case", "root-jobs")
    p = op(proj, "preview", "root-jobs", "--view", "summary", "--", "--policy-pack", "policies")
    assert p.returncode != 0
    assert "policy slurm-no-root-jobs (mandatory) on urn:pulumi:root-jobs::" in p.stdout, p.stdout
    assert "DisableRootJobs" in p.stdout
    assert "policy pack gpu-fleet@" in p.stdout and "mandatory violation(s), above" in p.stdout
