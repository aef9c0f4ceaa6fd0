"""Reaching a lab host as root: the lab's own key and known_hosts, never the user's ssh config.

Every lab module that runs a command on a lab host builds its ssh line here.
"""

from __future__ import annotations

import os
import subprocess

from .common import KEY, KNOWN_HOSTS, STATE, log, rel, run


def ssh_argv(address: str, user: str = "root", connect_timeout: int = 5) -> list[str]:
    """ssh to a lab host with the lab key, checking its host key against the lab's known_hosts."""
    return [
        "ssh", "-F", "/dev/null", "-i", str(KEY), "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={KNOWN_HOSTS}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={connect_timeout}", "-o", "LogLevel=ERROR",
        f"{user}@{address}",
    ]


def ssh_ok(address: str, connect_timeout: int = 3) -> bool:
    try:
        return subprocess.run(
            [*ssh_argv(address, connect_timeout=connect_timeout), "true"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=connect_timeout + 5,
        ).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def ensure_lab_key() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    if not (KEY.exists() and KEY.with_suffix(".pub").exists()):
        for p in (KEY, KEY.with_suffix(".pub")):
            if p.exists():
                p.unlink()
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpu-fleet-lab", "-f", str(KEY)])
        log(f"generated the lab SSH key {rel(KEY)}")
    os.chmod(KEY, 0o600)
