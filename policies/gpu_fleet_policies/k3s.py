"""K3s retirement: what the stack's resource graph must show before a K3s node leaves K3s.

The K3s retirement layer (components/layers/k3s_retirement) declares, per change ID, one
`k3s:Audit`, a `k3s:Preserve` per node, one `k3s:Seal` over every node's bundle, and a
`k3s:Stop` per node: agents in batches (each batch's stops depend on the previous batch's),
the server after every agent. These policies read that graph (stack policies: the engine's
dependency lists, followed transitively) and the Stop's inputs (a resource policy, which runs
again on real values before `pulumi up` stops anything):

- `retirement_problem` (used by `hosts-slurm-membership`): a K3s node is handed over only by a
  Stop for that node that waits on a Seal of its change, and whose `sealed` flag, once known,
  is true (and whose Seal, once it has run, sealed that node);
- `validate_postgres_proof` (`k3s-postgres-restore-proof`): a Stop whose audit found
  PostgreSQL running carries a restore proof for every database (dump restored into a scratch
  database, same tables and rows);
- `validate_stop_order` (`k3s-batches-server-last`): every agent Stop waits on the Seal, a
  batch starts only after the whole previous batch, no batch is larger than `batch_size`
  (>= 1), and the server's Stop waits on every agent Stop of its change.

Values unknown during preview (the audit, the proofs, `sealed` in a first preview) are
skipped; the graph itself is always known.
"""

from __future__ import annotations

from typing import Any, Optional

from . import props as P
from . import stackconfig
from .common import Res, resource


class Graph:
    """The stack's resources by URN, with each one's direct dependencies (URNs)."""

    def __init__(self, args) -> None:
        self.res: dict[str, Res] = {}
        self.deps: dict[str, list[str]] = {}
        for r in getattr(args, "resources", None) or []:
            urn = getattr(r, "urn", "") or ""
            self.res[urn] = Res(r.resource_type, getattr(r, "name", "") or "", urn,
                                P.snapshot(getattr(r, "props", None)))
            deps = [getattr(d, "urn", "") for d in (getattr(r, "dependencies", None) or [])]
            for ds in (getattr(r, "property_dependencies", None) or {}).values():
                deps += [getattr(d, "urn", "") for d in ds or []]
            self.deps[urn] = [d for d in deps if d]
        self._closure: dict[str, frozenset[str]] = {}

    def of_type(self, rtype: str) -> list[Res]:
        return [r for r in self.res.values() if r.type == rtype]

    def closure(self, urn: str) -> frozenset[str]:
        """Every URN `urn` waits on, directly or through the graph."""
        if urn not in self._closure:
            seen: set[str] = set()
            todo = list(self.deps.get(urn, []))
            while todo:
                u = todo.pop()
                if u in seen:
                    continue
                seen.add(u)
                todo += self.deps.get(u, [])
            seen.discard(urn)
            self._closure[urn] = frozenset(seen)
        return self._closure[urn]

    def upstream(self, urn: str, rtype: str) -> list[Res]:
        return [self.res[u] for u in sorted(self.closure(urn)) if u in self.res and self.res[u].type == rtype]


def _known_text(res: Res, key: str) -> Optional[str]:
    v = res.get(key)
    return None if P.is_unknown(v) else P.text(v)


def node_of(res: Res) -> Optional[str]:
    """The node a Stop or Preserve acts on (its `conn`); None while unknown."""
    if P.contains_unknown(res.get("conn")):
        return None
    return P.host_of(res.props)


def change_of(res: Res) -> Optional[str]:
    return _known_text(res, "change_id")


def role_of(res: Res) -> Optional[str]:
    return _known_text(res, "role")


def stops_by_node(g: Graph) -> dict[str, list[Res]]:
    out: dict[str, list[Res]] = {}
    for s in g.of_type(P.K3S_STOP):
        n = node_of(s)
        if n:
            out.setdefault(n, []).append(s)
    return out


def _seals_for(g: Graph, stop: Res) -> list[Res]:
    """The Seals `stop` waits on that belong to its change (a Seal whose change ID is not
    known yet counts; one of another change does not)."""
    cid = change_of(stop)
    return [s for s in g.upstream(stop.urn, P.K3S_SEAL)
            if cid is None or change_of(s) is None or change_of(s) == cid]


def retirement_problem(g: Graph, node: str, stops: Optional[list[Res]]) -> Optional[str]:
    """Why the stack does not hand `node` over from K3s (a clause), or None when it does."""
    if not stops:
        return ("the stack does not retire it (no K3s Stop acts on it), so K3s still runs it; list it "
                "in gpu-fleet:k3s_retirement.retire (layer enabled) or take it out of "
                "gpu-fleet:slurm.partitions")
    for stop in stops:
        seals = _seals_for(g, stop)
        cid = change_of(stop) or "?"
        if not seals:
            return (f'its K3s Stop "{stop.name}" does not wait on a K3s Seal of change {cid}, so K3s would '
                    "be stopped without a sealed recovery bundle; make the stop depend on the seal of its "
                    "bundle (the K3s retirement layer does), or take it out of gpu-fleet:slurm.partitions")
        sealed = stop.get("sealed")
        if not P.is_unknown(sealed) and P.reveal(sealed) is not True:
            return (f'its K3s Stop "{stop.name}" has no sealed bundle (sealed is {P.reveal(sealed)!r}); '
                    "seal the node's bundle (k3s:Seal) before it is stopped and handed to Slurm, or take "
                    "it out of gpu-fleet:slurm.partitions")
        for seal in seals:
            out = seal.get("sealed")
            if P.is_unknown(out) or not isinstance(P.reveal(out), dict):
                continue  # not run yet (or unknown during preview)
            if not P.reveal(out).get(node):
                return (f'the K3s Seal "{seal.name}" of change {cid} sealed no bundle for {node}; add the '
                        "node to the seal (its preserve's items), or take it out of gpu-fleet:slurm.partitions")
    return None


# ---- no retirement without a PostgreSQL restore proof ----------------------------------------

def validate_postgres_proof(args, report_violation) -> None:
    res = resource(args, P.K3S_STOP)
    if res is None:
        return
    audit, proofs = res.get("audit"), res.get("proofs")
    if P.contains_unknown(audit) or P.contains_unknown(proofs):
        return
    audit = P.reveal(audit)
    if not isinstance(audit, dict) or audit.get("postgres") is not True:
        return
    what = res.describe("K3s Stop", f"{role_of(res) or 'node'}")
    proofs = P.reveal(proofs)
    if not isinstance(proofs, dict) or not proofs:
        report_violation(
            f"{what} stops K3s on a node whose audit found PostgreSQL running, without a PostgreSQL "
            "restore proof; pass the node's preserve proofs (each database dumped, restored into a scratch "
            "database and compared, tables and rows) to the stop before K3s is stopped.", res.urn or None)
        return
    for db, proof in sorted(proofs.items()):
        src = proof.get("source") if isinstance(proof, dict) else None
        got = proof.get("restored") if isinstance(proof, dict) else None
        if not isinstance(src, dict) or not isinstance(got, dict) or src != got:
            report_violation(
                f'{what} has no valid restore proof for PostgreSQL database "{db}": the scratch restore '
                "does not show the source's user tables and row counts; pass a proof whose restored "
                "counts equal the source's (preserve the database again) before K3s is stopped.",
                res.urn or None)


# ---- batches >= 1, the server last ------------------------------------------------------------

def _batch_size() -> tuple[Any, bool]:
    """(`gpu-fleet:k3s_retirement.batch_size`, whether the stack config sets it)."""
    cfg = stackconfig.get() or {}
    k = cfg.get("k3s_retirement")
    if isinstance(k, dict) and "batch_size" in k:
        return k["batch_size"], True
    return None, False


def validate_stop_order(args, report_violation) -> None:
    size, is_set = _batch_size()
    if is_set:
        n = P.as_int(size)
        if n is None or n < 1:
            report_violation(
                f"gpu-fleet:k3s_retirement.batch_size is {P.reveal(size)!r}: K3s agents are stopped in "
                "batches of at least one node; set batch_size to 1 or more.", None)
            size = None
        else:
            size = n
    else:
        size = None
    g = Graph(args)
    changes: dict[str, list[Res]] = {}
    for s in sorted(g.of_type(P.K3S_STOP), key=lambda r: (r.name, r.urn)):
        changes.setdefault(change_of(s) or "?", []).append(s)
    for cid, stops in sorted(changes.items()):
        agents = [s for s in stops if role_of(s) == "agent"]
        servers = [s for s in stops if role_of(s) == "server"]
        for a in agents:
            if not _seals_for(g, a):
                report_violation(
                    f'{a.describe("K3s Stop", "agent")} does not wait on the K3s Seal of change {cid}, so it '
                    "is in no batch chain and could stop K3s before the bundle is sealed; make it depend on "
                    "the seal (and on the previous batch's stops).", a.urn or None)
        _check_batches(g, cid, agents, size, report_violation)
        if len(servers) > 1:
            names = ", ".join(f'"{s.name}"' for s in servers)
            report_violation(
                f"K3s change {cid} stops the server role more than once ({names}); remove all but the "
                "K3s server's stop (gpu-fleet:k3s_retirement.server).", servers[0].urn or None)
        for s in servers:
            up = g.closure(s.urn)
            missing = [a.name for a in agents if a.urn not in up]
            if missing:
                report_violation(
                    f'{s.describe("K3s Stop", "server")} does not wait on the agent Stops '
                    f"{', '.join(missing)} of change {cid}: the server stops last, after every agent "
                    "batch; make it depend on them.", s.urn or None)
            if not _seals_for(g, s):
                report_violation(
                    f'{s.describe("K3s Stop", "server")} does not wait on the K3s Seal of change {cid}; '
                    "make it depend on the seal.", s.urn or None)


def _check_batches(g: Graph, cid: str, agents: list[Res], size: Optional[int], report_violation) -> None:
    """Agents by batch (how many agent Stops each waits on, transitively): a batch waits on the
    whole previous batch and holds at most `size` stops."""
    urns = {a.urn for a in agents}
    level: dict[str, int] = {}

    def depth(urn: str, seen: frozenset = frozenset()) -> int:
        if urn not in level:
            before = [u for u in g.closure(urn) if u in urns and u not in seen]
            level[urn] = 1 + max((depth(u, seen | {urn}) for u in before), default=-1)
        return level[urn]

    for a in agents:
        depth(a.urn)
    batches: dict[int, list[Res]] = {}
    for a in agents:
        batches.setdefault(level[a.urn], []).append(a)
    for lvl, batch in sorted(batches.items()):
        if lvl > 0:
            previous = batches.get(lvl - 1, [])
            for a in batch:
                missing = [p.name for p in previous if p.urn not in g.closure(a.urn)]
                if missing:
                    report_violation(
                        f'{a.describe("K3s Stop", "agent")} of change {cid} does not wait on the previous '
                        f"batch's stops {', '.join(missing)}; make every stop of a batch depend on every "
                        "stop of the batch before it.", a.urn or None)
        if size is not None and len(batch) > size:
            report_violation(
                f"K3s change {cid} stops {len(batch)} agents at once "
                f"({', '.join(a.name for a in batch)}), more than gpu-fleet:k3s_retirement.batch_size "
                f"({size}); make each batch's stops depend on the previous batch's.", batch[0].urn or None)
