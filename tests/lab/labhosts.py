"""Helpers for tests on lab hosts: their connection inputs and a plain ssh runner."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from components.config.load import parse_fleet_config
from components.hosts import conn_input
from components.transport import SshTarget
from components.transport.ssh import ssh_argv

ROOT = Path(__file__).resolve().parents[2]


def lab_config():
    raw = yaml.safe_load((ROOT / "stacks" / "Pulumi.lab.yaml").read_text())["config"]
    return parse_fleet_config(raw, "stacks/Pulumi.lab.yaml")


def lab_conn(name: str, **override) -> dict:
    """The `conn` input for a lab host, as the program would build it."""
    cfg = lab_config()
    hosts = {h.name: h for h in [cfg.hosts.storage, cfg.hosts.controller, *cfg.nodes]}
    return {**conn_input(hosts[name], cfg.ssh, ROOT), **override}


def ssh(name: str, script: str, check: bool = True, timeout: float = 120,
        **override) -> subprocess.CompletedProcess:
    """Run a shell script on a lab host as root, outside the code under test's logging."""
    t = SshTarget.from_dict(lab_conn(name, **override))
    p = subprocess.run([*ssh_argv(t), "--", script], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{name}: {script!r} exited {p.returncode}: {p.stdout}{p.stderr}")
    return p


def repo_version(package: str) -> str:
    """The version the lab's apt repository serves of `package` (as the controller sees it)."""
    out = ssh("ctl", f"apt-get -q update >/dev/null 2>&1; apt-cache policy {package}").stdout
    return next(line.split()[1] for line in out.splitlines() if "Candidate:" in line)


def command_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
