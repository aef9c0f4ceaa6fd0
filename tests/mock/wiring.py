"""The wiring tests' shared harness: a stack with every layer's secrets present (accounting
on), built offline under mocks whose monitor records each registration's parent chain and its
explicit dependencies, so the tests read the dependency graph the engine would act on. Each
layer's wiring tests are in tests/mock/test_<layer>_wiring.py.
"""

from __future__ import annotations

import pulumi

from components.config.load import parse_fleet_config
from components.fleet import Fleet, FleetSecrets

NODES = [
    {"name": "gpu01", "address": "192.0.2.21", "owner": "slurm", "cpus": 80, "real_memory_mib": 184000,
     "gpus": {"count": 8}, "canary": True},
    {"name": "gpu02", "address": "192.0.2.22", "owner": "free", "cpus": 80, "real_memory_mib": 184000,
     "gpus": {"count": 8}},
    {"name": "gpu03", "address": "192.0.2.23", "owner": "slurm", "cpus": 80, "real_memory_mib": 184000,
     "gpus": {"count": 8}},
]
RAW = {
    "gpu-fleet:hosts": {"storage": {"name": "storage", "address": "192.0.2.10"},
                        "controller": {"name": "storage", "address": "192.0.2.10"}},
    "gpu-fleet:nodes": NODES,
    "gpu-fleet:slurm": {"cluster_name": "v100",
                        "partitions": [{"name": "v100", "nodes": ["gpu01", "gpu02", "gpu03"],
                                        "default": True}]},
    "gpu-fleet:accounting": {"enabled": True},
}


class Graph(pulumi.runtime.Mocks):
    """Returns inputs as state; the monitor wrapper below records the graph."""

    def __init__(self) -> None:
        self.deps: dict[str, set[str]] = {}   # name -> names it explicitly depends on
        self.chain: dict[str, str] = {}       # name -> the URN's type chain
        self.inputs: dict[str, dict] = {}
        self.chains: set[str] = set()  # every URN's type chain (names may repeat across types)
        self._by_urn: dict[str, str] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.inputs[args.name] = dict(args.inputs)
        state = dict(args.inputs)
        if args.typ == "pulumi-python:dynamic/gpu:GpuBaseline":
            names = [n["name"] for n in args.inputs["nodes"]]
            state.update(healthy_nodes=names, verdicts={n: {"verdict": "ok"} for n in names})
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs):
        raise AssertionError(f"no invoke expected in an offline tree, got {args.token}")

    def record(self, request, urn: str) -> None:
        self._by_urn[urn] = request.name
        self.chain[request.name] = urn.split("::")[2]
        self.chains.add(urn.split("::")[2])
        self.deps[request.name] = {self._by_urn.get(d, d) for d in request.dependencies}

    def before(self, first: str, then: str) -> bool:
        """Whether `then` (transitively) waits on `first`."""
        seen, todo = set(), [then]
        while todo:
            n = todo.pop()
            for d in self.deps.get(n, ()):
                if d == first:
                    return True
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return False


def build(raw: dict) -> Fleet:
    cfg = parse_fleet_config(raw, "stacks/Pulumi.test.yaml")
    secret = pulumi.Output.secret
    return Fleet("test", cfg, secrets=FleetSecrets(secret("m" * 64), secret("pw"), secret("j" * 64)))


def settled(fleet: Fleet) -> pulumi.Output:
    """Resolves once the last resources of the tree (the final acceptance) are registered."""
    return pulumi.Output.all(fleet.acceptance.fleet.urn, fleet.accounting.checked.urn)
