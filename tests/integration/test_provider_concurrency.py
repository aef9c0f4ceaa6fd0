"""The real engine and the project's provider process (components/provider_host.py).

Hosts are a local shell behind a fake ssh (a TEST DOUBLE of the network hop only, as in
test_interrupted_run.py); the resources are the real CommandWithVerify primitive. Each create
holds for HOLD_S and writes when it ran, so the overlap of the intervals is how many provider
calls the engine got served at once: the SDK's own server serves 4.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.transport.ssh import MAX_SESSIONS
from tests.pulumi_cli import PulumiProject

from .programs import program_project

STACK = "t"
HOLD_S = 3

PROGRAM = '''
import json
import pulumi
from components.providers import CommandWithVerify
from components.transport import SshTarget

cfg = pulumi.Config("gpu-fleet")
root = cfg.require("root")
for res, host, addr in json.loads(cfg.require("layout")):
    conn = SshTarget(host, addr, use_ssh_config=False).as_dict()
    d = f"{root}/{res}"
    CommandWithVerify(res, conn=conn,
                      create=["sh", "-c", 'mkdir -p "$1"; date +%s.%N > "$1/start"; sleep "$2"; '
                              'date +%s.%N > "$1/end"; touch "$1/done"', "sh", d, str({hold})],
                      verify=["test", "-e", f"{d}/done"], delete=["rm", "-rf", d])
'''

def project(tmp: Path, layout: list[tuple[str, str, str]]) -> PulumiProject:
    proj = program_project(tmp, PROGRAM.replace("{hold}", str(HOLD_S)))
    (tmp / "hosts").mkdir()
    proj.env.update(GPU_FLEET_COMMAND_LOG=str(tmp / "log.jsonl"))
    proj.write_stack(STACK, "config:\n  gpu-fleet:root: {}\n  gpu-fleet:layout: '{}'\n".format(
        tmp / "hosts", json.dumps(layout)))
    proj.init_stack(STACK, secrets=False)
    return proj


def most_at_once(root: Path) -> int:
    spans = [(float((d / "start").read_text()), float((d / "end").read_text())) for d in root.iterdir()]
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


def log(tmp: Path) -> list[dict]:
    path = tmp / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_creates_on_many_hosts_run_at_the_engines_parallelism(tmp_path, capsys):
    proj = project(tmp_path, [(f"r{i}", f"node{i}", f"127.0.0.{i + 1}") for i in range(12)])
    proj.run("up", "--stack", STACK, "--yes", "--skip-preview", "--parallel", "12", timeout=300)
    n = most_at_once(tmp_path / "hosts")
    with capsys.disabled():
        print(f"\n  12 hosts, --parallel 12: {n} creates at once (the SDK's own server: 4)")
    assert n >= 10


def test_one_hosts_commands_stay_under_max_sessions_and_its_probes_share_round_trips(tmp_path, capsys):
    proj = project(tmp_path, [(f"r{i}", "node1", "127.0.0.1") for i in range(12)])
    proj.run("up", "--stack", STACK, "--yes", "--skip-preview", "--parallel", "16", timeout=300)
    n = most_at_once(tmp_path / "hosts")
    assert 4 < n <= MAX_SESSIONS
    (tmp_path / "log.jsonl").unlink()
    proj.run("up", "--stack", STACK, "--yes", "--refresh", "--skip-preview", "--expect-no-changes",
             "--parallel", "16", timeout=300)
    sent = [e for e in log(tmp_path) if e["cmd"] != "true"]  # `true`: opening the connection, once a run
    probed = sorted(f for e in sent for f in e["for"])
    with capsys.disabled():
        print(f"\n  12 resources on one host: {n} creates at once (cap {MAX_SESSIONS}); a no-op refresh: "
              f"{len(sent)} round trips for {len(probed)} probes")
    assert not [e for e in sent if e["mutating"]]
    assert len(probed) == 12 and len(set(probed)) == 12, probed  # each resource probed once
    assert all(p.startswith("CommandWithVerify") for p in probed)
    assert len(sent) <= 4, sent


@pytest.fixture(autouse=True)
def _no_inherited_log(monkeypatch):
    monkeypatch.delenv("GPU_FLEET_COMMAND_LOG", raising=False)
