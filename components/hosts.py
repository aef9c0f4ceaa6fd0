"""From the stack's host and SSH settings to the transport's connection input."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from .config.hosts import HostSpec, SshSpec
from .transport import SshTarget


def _abs(path: Optional[str], root: Path) -> Optional[str]:
    if not path:
        return None
    p = Path(os.path.expanduser(path))
    return str(p if p.is_absolute() else (root / p).resolve())


def target_for(host: HostSpec, ssh: SshSpec, root: Optional[Path] = None) -> SshTarget:
    """Key and known_hosts paths relative to the project root become absolute here,
    because the dynamic provider process may run elsewhere."""
    root = root or Path.cwd()
    return SshTarget(
        name=host.name, address=host.address, port=host.ssh_port, user=ssh.user,
        identity_file=_abs(ssh.identity_file, root), known_hosts_file=_abs(ssh.known_hosts_file, root),
        proxy_jump=ssh.proxy_jump, use_ssh_config=ssh.use_ssh_config,
        connect_timeout_s=ssh.connect_timeout_s,
    )


def conn_input(host: HostSpec, ssh: SshSpec, root: Optional[Path] = None) -> dict:
    """The `conn` input every host primitive takes (no secret in it)."""
    return target_for(host, ssh, root).as_dict()
