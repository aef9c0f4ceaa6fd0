"""The wiring that makes a rollout safe, asserted on the whole component tree under mocks.

Every layer is built with its secrets present (accounting on), offline; the mock
monitor records each registration's parent chain and its explicit dependencies,
so the tests read the dependency graph the engine would act on.
"""

from __future__ import annotations

import pulumi
import pytest

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


@pytest.fixture
def graph():
    g = Graph()
    pulumi.runtime.set_mocks(g, project="gpu-fleet", stack="test", preview=False)
    monitor = pulumi.runtime.settings.SETTINGS.monitor
    register = monitor.RegisterResource

    def recording(request):
        response = register(request)
        g.record(request, response.urn)
        return response

    monitor.RegisterResource = recording
    yield g
    pulumi.runtime.settings.reset_options()


def build(raw: dict) -> Fleet:
    cfg = parse_fleet_config(raw, "stacks/Pulumi.test.yaml")
    secret = pulumi.Output.secret
    return Fleet("test", cfg, secrets=FleetSecrets(secret("m" * 64), secret("pw"), secret("j" * 64)))


def settled(fleet: Fleet) -> pulumi.Output:
    """Resolves once the last resources of the tree (the final acceptance) are registered."""
    return pulumi.Output.all(fleet.acceptance.canary.urn, fleet.accounting.checked.urn)


@pulumi.runtime.test
def test_each_layer_is_a_direct_child_of_the_fleet(graph):
    fleet = build(RAW)

    def check(_):
        for name, typ in [("gpu", "gpu-fleet:gpu:GpuRuntime"), ("slurm", "gpu-fleet:slurm:SlurmCluster"),
                          ("accounting", "gpu-fleet:accounting:Accounting"),
                          ("acceptance", "gpu-fleet:acceptance:Acceptance")]:
            assert graph.chain[name] == f"gpu-fleet:index:Fleet${typ}", name
        # no layer's resource hangs under another layer
        assert graph.chain["cluster-id"].startswith("gpu-fleet:accounting:Accounting$")
        assert graph.chain["canary-acceptance"].startswith("gpu-fleet:acceptance:Acceptance$")
        assert graph.chain["canary-first"].startswith("gpu-fleet:slurm:SlurmCluster$")

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_identities_come_before_packages_on_every_host(graph):
    fleet = build(RAW)

    def check(_):
        for h in ("storage", "gpu01", "gpu02", "gpu03"):
            assert f"{h}-accounts" in graph.deps[f"{h}-slurm-packages"], h
            users = [m["name"] for m in graph.inputs[f"{h}-accounts"]["members"]]
            assert users == ["munge", "slurm", "fleetcanary"], (h, users)
            assert graph.before(f"{h}-slurm-packages", f"{h}-munge-key")

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_accounting_is_ready_before_slurmctld_and_builds_on_the_controller_base(graph):
    fleet = build(RAW)

    def check(_):
        assert "cluster-id" in graph.deps["storage-slurmctld"]
        for step in ("slurmdbd-serving", "dbd-reachability", "cluster-registration"):
            assert graph.before(step, "storage-slurmctld"), step
        assert graph.before("storage-slurm-packages", "restd-account")
        assert graph.before("storage-munge", "restd-account")
        # slurmrestd and the verification come after slurmctld, the final acceptance after both
        assert graph.before("storage-slurmctld", "slurmrestd")
        assert graph.before("accounting-check", "canary-acceptance")

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_the_upgrade_window_is_checked_before_the_release_is_published_or_any_source_moves(graph):
    fleet = build(RAW)

    def check(_):
        release = next(n for n in graph.deps if n.startswith("slurm-release-"))
        assert "slurm-upgrade-window" in graph.deps[release]
        for h in ("storage", "gpu01", "gpu02", "gpu03"):
            assert graph.before("slurm-upgrade-window", f"{h}-slurm-apt-source"), h
        window = graph.inputs["slurm-upgrade-window"]
        assert [(x["conn"]["name"], x["set"]) for x in window["hosts"]] == [
            ("storage", "controller"), ("gpu01", "node"), ("gpu02", "node"), ("gpu03", "node")]
        assert window["sets"]["node"]["upgrade_from"] == ["slurm-client", "slurmd"]

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_canary_first_gate_comes_before_every_other_nodes_packages(graph):
    fleet = build(RAW)

    def check(_):
        assert graph.before("gpu01-slurmd", "canary-first")
        assert graph.before("storage-slurmctld", "canary-first")
        for h in ("gpu02", "gpu03"):
            assert "canary-first" in graph.deps[f"{h}-slurm-packages"], h
            # nothing of the release (packages, key, config, daemons) reaches another node first
            for r in ("munge-key", "slurm-config", "munge", "slurmd"):
                assert graph.before("canary-first", f"{h}-{r}"), (h, r)
        assert not graph.before("canary-first", "gpu01-slurm-packages")

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_only_the_final_acceptance_opens_partitions(graph):
    fleet = build(RAW)

    def check(_):
        jobs = {n: i for n, i in graph.inputs.items() if "partitions" in i and "open_partitions" in i}
        assert sorted(jobs) == ["canary-acceptance", "canary-first"]
        assert jobs["canary-first"]["open_partitions"] is False
        assert jobs["canary-acceptance"]["open_partitions"] is True
        for n in ("slurm-reconfigure", "gpu02-slurmd", "gpu03-slurmd", "accounting-check"):
            assert graph.before(n, "canary-acceptance"), n

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_without_accounting_slurmctld_waits_on_nothing_of_it(graph):
    raw = {**RAW, "gpu-fleet:accounting": {"enabled": False}}
    fleet = build(raw)
    assert fleet.accounting is None

    def check(_):
        assert not any(n.startswith(("slurmdbd", "cluster-id", "accounting")) for n in graph.inputs)
        assert graph.deps["storage-slurmctld"] >= {"storage-munge", "storage-slurm.conf"}

    return pulumi.Output.all(fleet.acceptance.canary.urn).apply(check)


@pulumi.runtime.test
def test_admission_refuses_a_node_the_gpu_gate_failed_and_says_why(graph):
    fleet = build(RAW)
    gate = fleet.gpu.gate
    assert gate.judges == frozenset({"gpu01", "gpu02", "gpu03"})

    def check(out):
        # the mock baseline passes every node it probed
        assert out == {"admitted": ["gpu01", "gpu02", "gpu03"], "refused": {}}

    return fleet.admission.exports()["admission"].apply(check)


STORAGE = {"enabled": True, "clients": "192.0.2.0/24", "server": "ganesha", "client": "fuse-libnfs",
           "server_packages": {"nfs-ganesha": "4.3-2"}}


@pytest.fixture
def stored_graph(graph):
    """The mock returns the client check's verdicts: gpu03's mounts failed."""
    new_resource = graph.new_resource

    def with_clients(args):
        rid, state = new_resource(args)
        if args.typ == "pulumi-python:dynamic/storage:ClientCheck":
            state.update(passed=["gpu01", "gpu02"], reasons={"gpu03": ["/mnt/data is not mounted"]})
        return rid, state

    graph.new_resource = with_clients
    return graph


@pulumi.runtime.test
def test_storage_comes_first_and_gates_admission(stored_graph):
    g = stored_graph
    fleet = build({**RAW, "gpu-fleet:storage": STORAGE})

    def check(out):
        assert "gpu-fleet:index:Fleet$gpu-fleet:storage:Storage" in g.chains
        # datasets, then the server, then what it exports, then the mounts, then the client check
        assert g.before("storage-datasets", "storage-server-packages")
        assert g.before("storage-mounted-check", "storage-nfs-server")
        assert g.before("storage-ganesha-conf", "storage-nfs-server")
        assert g.before("storage-nfs-server", "storage-exports")
        for h in ("gpu01", "gpu02", "gpu03"):
            for d in ("models", "data"):
                assert g.before("storage-exports", f"{h}-{d}-mount")
                assert g.before(f"{h}-{d}-mount", "storage-clients")
        assert out == {"admitted": ["gpu01", "gpu02"], "refused": {"gpu03": "storage: /mnt/data is not mounted"}}
        job = g.inputs["canary-acceptance"]
        assert (job["marker"], job["job_root"], job["readonly_probe"]) == \
            ("/mnt/models/.gpu-fleet-store", "/mnt/data/jobs", "/mnt/models")
        assert g.inputs["canary-first"]["job_root"] == "/mnt/data/jobs"

    return pulumi.Output.all(fleet.admission.exports()["admission"], fleet.acceptance.canary.urn).apply(lambda t: check(t[0]))


@pulumi.runtime.test
def test_guards_start_after_every_slurmd_and_the_partitions_open_only_on_guarded_nodes(graph):
    fleet = build({**RAW, "gpu-fleet:guards": {"enabled": True}})

    def check(_):
        assert graph.chain["guards"] == "gpu-fleet:index:Fleet$gpu-fleet:guards:Guards"
        for n in ("gpu01", "gpu02", "gpu03"):
            assert graph.chain[f"{n}-guard-check"].startswith("gpu-fleet:guards:Guards$")
            for slurmd in ("gpu01-slurmd", "gpu02-slurmd", "gpu03-slurmd", "slurm-reconfigure"):
                assert graph.before(slurmd, f"{n}-guard"), (slurmd, n)
            assert graph.before(f"{n}-guard-unit", f"{n}-guard-check")
            assert graph.before(f"{n}-guard-check", "canary-acceptance"), n
            assert not graph.before(f"{n}-guard-check", "canary-first"), n  # the gate does not wait on them

    return settled(fleet).apply(check)
