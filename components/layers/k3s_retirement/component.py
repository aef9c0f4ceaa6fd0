"""The K3s retirement layer: K3s nodes handed over to Slurm with K3s kept whole (the seed's
保留式退役), and brought back by the rollback.

In order, each step waiting on the one before:

1. `K3sAudit`: every retired node at once (CPU topology, memory, GPUs and who holds them,
   services, mounts, NTP, cgroup, root disk, `slurmd -C`), judged against the stack's node
   spec; a difference stops the retirement before anything changes;
2. `K3sPreserve` per node, the server first (its API export names the hostPath volumes every
   node preserves): baseline, datastore (online backup), token, API objects, hostPath data,
   units and config, PostgreSQL dumps proven in a scratch database; resumable per change ID;
3. `K3sSeal`: every item re-hashed against the steps' records, then a manifest and a SEAL per
   node; nothing is stopped before it;
4. `K3sStop`: agents in batches of `batch_size`, the server after the last batch. A stopped,
   sealed node is handed over: the admission gate passes it, and the Slurm layer's resources
   on it wait for its stop (and are removed before it is restored).

Rollback (destroy, or a node taken out of `retire`) is each `K3sStop`'s delete, in reverse
order: the server first, then the agents; the bundle and everything K3s had stay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

import pulumi

from ...kit import after_of
from ...admission import Gate
from ...site import Site
from .bundle import batches
from .config import K3sRetirementLayer
from .retire import K3sAudit, K3sPreserve, K3sSeal, K3sStop


@dataclass(frozen=True, kw_only=True)
class K3sRetirementInputs:
    site: Site
    k3s_retirement: K3sRetirementLayer
    #: where the nodes' GPU device files are (slurm.gpu_device_prefix): the audit and each
    #: stop prove K3s released them
    gpu_device_prefix: str


@dataclass(frozen=True)
class K3sRetirementOutputs:
    #: node -> its stop: the Slurm layer's resources on that node wait on it
    handed_over: Mapping[str, pulumi.Resource]
    gate: Gate
    audit: pulumi.Output[dict]
    preserves: dict[str, K3sPreserve]
    sealed: pulumi.Output[dict]

    def exports(self) -> dict[str, pulumi.Input]:
        nodes = sorted(self.preserves)
        return {"k3sRetirement": pulumi.Output.all(
            self.audit, self.sealed, self.gate.passed,
            *[pulumi.Output.all(self.preserves[n].done_before, self.preserves[n].ran, self.preserves[n].proofs)
              for n in nodes]).apply(lambda t: {
                "audit": t[0], "sealed": t[1], "handedOver": t[2],
                "preserve": {n: {"foundDone": d[0], "ran": d[1],
                                 "postgres": {db: {"tables": p["tables"], "rows": p["rows"]}
                                              for db, p in (d[2] or {}).items()}}
                             for n, d in zip(nodes, t[3:])}})}


class K3sRetirement(pulumi.ComponentResource):
    """Audit, preserve with proof, seal, stop in batches (server last), hand over."""

    def __init__(self, name: str, inputs: K3sRetirementInputs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-fleet:k3s:K3sRetirement", name, None, opts)
        site, k, gpu_prefix = inputs.site, inputs.k3s_retirement, inputs.gpu_device_prefix
        after = after_of(self)
        conn = {n.name: site.conn(n) for n in site.nodes}
        storage = site.conn(site.hosts.storage)
        retired = [n for n in site.nodes if n.name in k.retire]
        # config's check: both required when the layer is enabled (and it is built only then)
        assert k.server is not None and k.change_id is not None
        server, change_id = k.server, k.change_id
        agents = [n.name for n in retired if n.name != server]
        units = [k.server_unit, k.agent_unit]

        audit = K3sAudit(
            "k3s-audit", conn=conn[server], change_id=change_id, gpu_prefix=gpu_prefix,
            units=units, max_parallel=site.ssh.max_parallel,
            nodes=[{"conn": conn[n.name], "spec": {"cpus": n.cpus, "real_memory_mib": n.real_memory_mib,
                                                    "gpus": n.gpus.count if n.gpus else 0}} for n in retired],
            opts=after())
        common = {"storage": storage, "server": conn[server], "bundle_dir": k.bundle_dir,
                  "change_id": k.change_id, "paths": k.paths.model_dump(), "timeout_s": k.timeout_s}

        def preserve(name: str, role: str, *deps: pulumi.Resource, host_paths=None) -> K3sPreserve:
            facts = audit.audit.apply(lambda a: (a or {}).get(name))
            props = {**common, "conn": conn[name], "role": role, "audit": facts, "kinds": list(k.kinds),
                     "skip_namespaces": list(k.skip_namespaces), "all_units": units,
                     "host_paths": host_paths if host_paths is not None else list(k.host_paths)}
            return K3sPreserve(f"{name}-k3s-preserve", props=props, opts=after(audit, *deps))

        # the server's API export names the hostPath volumes every node preserves
        first = preserve(server, "server")
        paths = first.host_paths.apply(lambda hp: sorted(set(hp or []) | set(k.host_paths)))
        preserves = {server: first, **{a: preserve(a, "agent", first, host_paths=paths) for a in agents}}
        seal = K3sSeal("k3s-seal", conn=storage, bundle_dir=k.bundle_dir, change_id=change_id,
                       nodes=pulumi.Output.all(*[p.items for p in preserves.values()]).apply(
                           lambda its: dict(zip(preserves, its))),
                       opts=after(*preserves.values()))

        def stop(name: str, role: str, *deps: pulumi.Resource) -> K3sStop:
            p = preserves[name]
            props = {**common, "conn": conn[name], "role": role,
                     "units": [k.server_unit if role == "server" else k.agent_unit],
                     "gpu_prefix": gpu_prefix, "ready_within_s": k.ready_within_s,
                     "audit": audit.audit.apply(lambda a: (a or {}).get(name)), "items": p.items,
                     "proofs": p.proofs, "sealed": seal.sealed.apply(lambda s: bool((s or {}).get(name)))}
            return K3sStop(f"{name}-k3s-stop", props=props, opts=after(seal, *deps))

        stops: dict[str, K3sStop] = {}
        previous: Sequence[pulumi.Resource] = []
        for batch in batches(agents, k.batch_size):
            now = [stop(a, "agent", *previous) for a in batch]
            stops.update(zip(batch, now))
            previous = now
        if server in k.retire:
            stops[server] = stop(server, "server", *stops.values())
        names = list(stops)
        passed = pulumi.Output.all(*[s.stopped for s in stops.values()]).apply(
            lambda st: [n for n, ok in zip(names, st) if ok])
        gate = Gate(layer="k3s_retirement", judges=frozenset(k.retire), passed=passed,
                    reasons=passed.apply(lambda ok: {n: ["K3s not stopped with a sealed bundle"]
                                                     for n in names if n not in ok}))
        self.outputs = K3sRetirementOutputs(handed_over=stops, gate=gate, audit=audit.audit,
                                            preserves=preserves, sealed=seal.sealed)
        self.register_outputs({})
