"""The storage layer's wiring: storage first, and its client check gates admission."""

from __future__ import annotations

import pulumi
import pytest

from .wiring import RAW, build


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
        job = g.inputs["fleet-acceptance"]
        assert (job["marker"], job["job_root"], job["readonly_probe"]) == \
            ("/mnt/models/.gpu-fleet-store", "/mnt/data/jobs", "/mnt/models")
        assert g.inputs["canary-first"]["job_root"] == "/mnt/data/jobs"

    return pulumi.Output.all(fleet.admission.exports()["admission"], fleet.acceptance.fleet.urn).apply(lambda t: check(t[0]))
