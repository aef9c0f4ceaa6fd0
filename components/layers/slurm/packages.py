"""SlurmPackages: the versioned Slurm package repository on the storage host.

The seed builds its own Slurm .debs and publishes them to a local repository
on storage, one directory per release, with Packages.gz and checksums, so every
host installs the same binaries and an upgrade is "publish the new directory,
then move hosts". Here:

- `publish` copies the release's .debs (every .deb in `source_dir` whose version
  is the release's Debian version) into `<root>/slurm/<release>/`, writes
  `Packages`, `Packages.gz`, `SHA256SUMS` and `release.json` (version, source
  hash), and is verified by `sha256sum -c`. A new release is a replacement, and
  Pulumi creates the replacement before deleting the old one: the new directory
  is published before any host moves to it.
- before it, `UpgradeWindow` (upgrades.py) refuses a new release some Slurm host cannot
  upgrade to in place, so `up --skip-preview` publishes nothing and moves no apt source;
- storage serves the repository read-only over HTTP (a systemd unit);
- each host gets an apt source for the release directory; its PackageSet then
  installs exact versions and holds them.

Releases are trusted by checksum and by the one-way path from the storage host;
signing them (a `Release` file + key) is left to the real fleet's build step.
"""

from __future__ import annotations

import json
from typing import Mapping, Sequence

import pulumi

from ...providers import CommandWithVerify, File, SystemdUnit
from ...scripts import script
from ...site import Site
from .config import SlurmRelease
from .upgrades import UpgradeWindow, own_packages

REPO_ROOT = "/srv/gpu-fleet/repo"
PORT = 8787

_PUBLISH = script(__file__, "publish.sh")


def release_name(r: SlurmRelease) -> str:
    return r.debian_version.replace("+", "_").replace("~", "_")


class SlurmPackages(pulumi.ComponentResource):
    """Publishes the stack's Slurm release on storage and points every Slurm host at it."""

    def __init__(self, site: Site, r: SlurmRelease, opts: pulumi.ResourceOptions | None = None,
                 node_after: Mapping[str, Sequence[pulumi.Resource]] | None = None):
        super().__init__("gpu-fleet:slurm:SlurmPackages", "slurm-packages", None, opts)
        st = site.hosts.storage
        st_conn = site.conn(st)
        rel = release_name(r)
        rel_dir = f"{REPO_ROOT}/slurm/{rel}"
        meta = json.dumps({"slurm": r.version, "debian_version": r.debian_version,
                           "source_sha256": r.source_sha256}, sort_keys=True)
        hosts = [site.hosts.controller, *site.slurm_nodes()]
        # `up --skip-preview` steps without a preview: a release a host cannot upgrade to in
        # place is refused here, before it is published or any apt source moves (upgrades.py)
        sets = {role: {"packages": pkgs, "upgrade_from": own_packages(pkgs, r.debian_version)}
                for role, pkgs in (("controller", r.controller_packages()), ("node", r.node_packages()))}
        self.window = UpgradeWindow(
            "slurm-upgrade-window", version=r.debian_version, sets=sets, max_parallel=site.ssh.max_parallel,
            hosts=[{"conn": site.conn(h), "set": "controller" if h is site.hosts.controller
                    else "node"} for h in hosts],
            opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, depends_on=[self.window])
        self.release = CommandWithVerify(
            f"slurm-release-{rel}", conn=st_conn,
            create=["sh", "-c", _PUBLISH, "sh", r.source_dir, rel_dir, r.debian_version, meta],
            verify=["sh", "-c", 'cd "$1" && sha256sum --quiet -c SHA256SUMS', "sh", rel_dir],
            delete=["rm", "-rf", rel_dir], triggers={"release": meta}, opts=child)
        self.server = SystemdUnit(
            "package-repo-http", conn=st_conn, unit="gpu-fleet-repo.service",
            content=(
                "[Unit]\nDescription=gpu-fleet package repository (read-only HTTP)\n"
                "After=network-online.target\n\n[Service]\nDynamicUser=yes\n"
                f"ExecStart=/usr/bin/python3 -m http.server {PORT} --bind {st.address} "
                f"--directory {REPO_ROOT}\nRestart=on-failure\nProtectSystem=strict\n"
                "ProtectHome=yes\nNoNewPrivileges=yes\n\n[Install]\nWantedBy=multi-user.target\n"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.release]))
        self.url = f"http://{st.address}:{PORT}/slurm/{rel}/"
        self.sources: dict[str, File] = {}
        for h in hosts:
            self.sources[h.name] = File(
                f"{h.name}-slurm-apt-source", conn=site.conn(h),
                path="/etc/apt/sources.list.d/gpu-fleet-slurm.list",
                content=f"# gpu-fleet: Slurm release {r.version} ({r.debian_version}) from {st.name}\n"
                        f"deb [trusted=yes] {self.url} ./\n",
                opts=pulumi.ResourceOptions(parent=self, depends_on=[
                    self.server, *(node_after or {}).get(h.name, ())]))
        self.register_outputs({"url": self.url, "release": rel})
