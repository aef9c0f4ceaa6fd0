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
#: the hosts the Slurm layer installs on
HOSTS = ["ctl", "node1", "node2", "node3"]

#: what a host's "as before" compares: packages, holds, accounts, Slurm's files and units, GPUs
SNAPSHOT = r"""
echo "pkgs $(dpkg-query -W -f='${Package}=${Version}\n' | sha256sum | cut -c1-16)"
echo "held $(apt-mark showhold | tr '\n' ' ')"
echo "users $(getent passwd slurm munge fleetcanary | cut -d: -f1,3 | tr '\n' ' ')"
echo "etc $(ls -A /etc/slurm /etc/munge 2>/dev/null | tr '\n' ' ')"
echo "units $(systemctl is-enabled slurmd slurmctld munge 2>/dev/null | tr '\n' ' ')"
echo "fakegpus $(ls /dev | grep -c fakegpu)"
"""


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


def snapshot(host: str) -> dict[str, str]:
    out = ssh(host, SNAPSHOT).stdout
    return {k: v.strip() for k, _, v in (line.partition(" ") for line in out.splitlines())}


def packages(host: str) -> dict[str, str]:
    """Every installed package's version."""
    out = ssh(host, "dpkg-query -W -f='${Package} ${Version}\\n'").stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


def repo_version(package: str) -> str:
    """The version the lab's apt repository serves of `package` (as the controller sees it)."""
    out = ssh("ctl", f"apt-get -q update >/dev/null 2>&1; apt-cache policy {package}").stdout
    return next(line.split()[1] for line in out.splitlines() if "Candidate:" in line)


def command_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
