"""The K3s retirement layer's config: which K3s nodes are taken over, and how K3s is kept whole."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import Field

from ...config.project import PROJECT
from ...config.types import ChangeId, HostName, KubeResource, RemotePath, Strict, UnitName

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


class K3sPaths(Strict):
    """Where K3s keeps what retirement preserves (K3s's own defaults)."""

    datastore: RemotePath = "/var/lib/rancher/k3s/server/db/state.db"
    token: RemotePath = "/var/lib/rancher/k3s/server/token"
    kubeconfig: RemotePath = "/etc/rancher/k3s/k3s.yaml"
    kubectl: RemotePath = "/usr/local/bin/kubectl"
    config_dir: RemotePath = "/etc/rancher/k3s"


class K3sRetirementLayer(Strict):
    """Nodes taken from K3s into Slurm, K3s kept whole: audit, preserve with proof, stop in
    batches (server last), hand over; rollback brings K3s back from the bundle.

    `change_id` names one retirement: every step's marker and the immutable baseline live under
    it in the bundle, so an interrupted `up` resumes that change; a new retirement after a
    rollback takes a new ID."""

    enabled: bool = False
    change_id: Optional[ChangeId] = None
    #: the K3s server node (stopped last, restored first)
    server: Optional[HostName] = None
    #: the K3s nodes this stack retires (owner k3s); they may then be in a partition
    retire: list[HostName] = Field(default_factory=list)
    batch_size: int = Field(4, ge=1, le=256)
    #: the recovery bundles, on the storage host (never deleted by a rollback)
    bundle_dir: RemotePath = "/srv/gpu-fleet/backup/k3s"
    #: the API kinds whose objects are exported (the workload intent)
    kinds: list[KubeResource] = Field(default_factory=lambda: [
        "deployments.apps", "daemonsets.apps", "statefulsets.apps", "cronjobs.batch", "jobs.batch",
        "services", "configmaps", "persistentvolumeclaims"], min_length=1)
    #: namespaces whose objects are not exported (K3s recreates its own)
    skip_namespaces: list[HostName] = Field(default_factory=lambda: [
        "kube-system", "kube-public", "kube-node-lease"])
    #: host directories preserved besides the hostPath volumes found in the exported objects
    host_paths: list[RemotePath] = Field(default_factory=list)
    paths: K3sPaths = K3sPaths()
    #: K3s's units (server, agent)
    server_unit: UnitName = "k3s.service"
    agent_unit: UnitName = "k3s-agent.service"
    #: an agent counts as Ready when its Ready condition is True and heartbeat is this fresh
    ready_within_s: int = Field(40, ge=5, le=600)
    timeout_s: int = Field(300, ge=30)



def check(cfg: FleetConfig) -> list[str]:
    """The K3s retirement layer's rules: one change ID, a K3s server, K3s nodes only, and never
    an agent left running without its server."""
    k = cfg.k3s_retirement
    if not k.enabled:
        return []
    where = f"{PROJECT}:k3s_retirement"
    problems = [f"{where}.{f}: required when the layer is enabled" for f in ("change_id", "server")
                if getattr(k, f) is None]
    if not k.retire:
        problems.append(f"{where}.retire: required when the layer is enabled: the K3s nodes to retire")
    by_name = {n.name: n for n in cfg.nodes}
    if k.server is not None:
        s = by_name.get(k.server)
        if s is None:
            problems.append(f"{where}.server: unknown node {k.server!r}")
        elif s.owner != "k3s":
            problems.append(f"{where}.server: node {k.server!r} is owned by {s.owner}, not k3s")
    seen: set[str] = set()
    for i, name in enumerate(k.retire):
        w = f"{where}.retire[{i}]"
        n = by_name.get(name)
        if name in seen:
            problems.append(f"{w}: node {name!r} listed twice")
        seen.add(name)
        if n is None:
            problems.append(f"{w}: unknown node {name!r}")
        elif n.owner != "k3s":
            problems.append(f"{w}: node {name!r} is owned by {n.owner}; only a k3s-owned node is retired")
    if k.server in seen:
        left = [n.name for n in cfg.nodes if n.owner == "k3s" and n.name not in seen]
        if left:
            problems.append(f"{where}.retire: retiring the server {k.server!r} would leave the K3s agents "
                            f"{', '.join(left)} without it; retire them too (the server stops last and "
                            "comes back first)")
    return problems
