"""The lab stack on Slurm 24.11 (the lab's second release, lab/slurm_release.py), shared by the
modules that run on it (test_v2411_*: they run last, alphabetically, as it installs another
release on hosts made again from the image)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from components.transport import SshTarget
from components.transport.ssh import ssh_argv
from lab import slurm_release
from tests.pulumi_cli import PulumiProject

from .labhosts import lab_conn, repo_version, ssh

STATE = "/var/lib/slurm/slurmctld/clustername"
SOURCE = "/srv/gpu-fleet/build/slurm-24.11"
BACKUPS = "/srv/gpu-fleet/backup/accounting-24.11"


def copy_release_to_storage() -> None:
    out = slurm_release.ensure_release()
    tar = subprocess.Popen(["tar", "cf", "-", "-C", str(out), *[p.name for p in slurm_release.debs(out)]],
                           stdout=subprocess.PIPE)
    t = SshTarget.from_dict(lab_conn("storage"))
    subprocess.run([*ssh_argv(t), "--", f"mkdir -p {SOURCE} && tar xf - -C {SOURCE}"], stdin=tar.stdout,
                   check=True, timeout=300)
    assert tar.wait() == 0


def state_file() -> str:
    return ssh("ctl", f"cat {STATE}").stdout.strip()


def release24_project(tmp: Path) -> PulumiProject:
    """A copy of the repo whose lab stack installs 24.11, accounting configured (off), its
    command log in `tmp`. The caller brings it up and destroys it."""
    copy_release_to_storage()
    proj = PulumiProject.copy_of_repo(tmp)
    proj.log = tmp / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(proj.log)
    proj.init_stack("lab")
    release = {"version": slurm_release.VERSION, "debian_version": slurm_release.DEBIAN_VERSION,
               "source_dir": SOURCE}
    for k, v in release.items():
        proj.run("config", "set", "--path", f"gpu-fleet:slurm.release.{k}", v, "--stack", "lab")
    # Its own history: the 22.05 modules' dumps are a schema 24.11's slurmdbd cannot upgrade.
    proj.run("config", "set", "--path", "gpu-fleet:accounting.backup_dir", BACKUPS, "--stack", "lab")
    for k, pkg in (("mariadb_version", "mariadb-server"), ("nftables_version", "nftables")):
        proj.run("config", "set", "--path", f"gpu-fleet:accounting.{k}", repo_version(pkg), "--stack", "lab")
    return proj
