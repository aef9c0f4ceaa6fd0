"""The model snapshot layer in the component tree, under mocks: what it declares on the storage
host and in which order, what the final acceptance job reads from it, what the Slurm layer's
canary-first gate does not wait for, and what the storage layer does differently with it."""

from __future__ import annotations

import hashlib
import json

import pulumi
import pytest

from components.config.load import parse_fleet_config
from components.fleet import Fleet, FleetSecrets
from components.layers.model_snapshot import render
from components.layers.model_snapshot.component import WHEELS_TARBALL
from tests.conftest import ROOT
from tests.mock.test_storage_wiring import STORAGE, stored_graph  # noqa: F401 (a fixture)
from tests.mock.wiring import RAW

REV = "0123456789abcdef0123456789abcdef01234567"
MODEL = {"enabled": True, "repo_id": "org/tiny", "revision": REV}
SNAP = f"/mnt/models/org/tiny/{REV}"
TOKEN = "hf_mockTokenValue0123456789"
FILES = {"model_index.json": 30, "unet/config.json": 21}
MODEL_TYPES = {
    "model-downloader-wheels": "pulumi-python:dynamic/host:Payload",
    "model-downloader-venv": "pulumi-python:dynamic/host:CommandWithVerify",
    "model-downloader-download-py": "pulumi-python:dynamic/host:File",
    "model-downloader-verify-py": "pulumi-python:dynamic/host:File",
    "model-downloader-publish-sh": "pulumi-python:dynamic/host:File",
    "model-downloader-config": "pulumi-python:dynamic/host:File",
    "model-downloader-token": "pulumi-python:dynamic/host:File",
    "model-downloader-unit": "pulumi-python:dynamic/host:SystemdUnit",
    "model-snapshot-view": "pulumi-python:dynamic/model:SnapshotView",
}


@pytest.fixture
def model_graph(stored_graph):  # noqa: F811
    """The mocks also record each resource's type and answer for the Snapshot as a published one."""
    g, new_resource = stored_graph, stored_graph.new_resource
    g.types = {}

    def with_snapshot(args):
        rid, state = new_resource(args)
        g.types.setdefault(args.name, set()).add(args.typ)
        if args.typ == "pulumi-python:dynamic/host:Payload":  # as the provider records it
            state.update(sha256=args.inputs["source_sha256"], present=True)
        if args.typ == "pulumi-python:dynamic/model:Snapshot":
            g.snapshot_inputs = dict(args.inputs)
            state.update(ok=True, manifest_sha256="ab" * 32, files=FILES, checks={"problems": []},
                         download={"ran_this_up": True})
        return rid, state

    g.new_resource = with_snapshot
    return g


def build(raw: dict, token: bool = True) -> Fleet:
    cfg = parse_fleet_config(raw, "stacks/Pulumi.test.yaml")
    secret = pulumi.Output.secret
    return Fleet("test", cfg, root=ROOT, secrets=FleetSecrets(
        secret("m" * 64), secret("pw"), secret("j" * 64), secret(TOKEN) if token else None))


def stack(model: dict | None = MODEL) -> dict:
    raw = {**RAW, "gpu-fleet:storage": STORAGE}
    if model is not None:
        raw["gpu-fleet:model_snapshot"] = model
    return raw


def settled(fleet: Fleet) -> pulumi.Output:
    outs = [fleet.acceptance.fleet.urn, fleet.accounting.checked.urn]
    if fleet.model is not None:
        outs += [fleet.model.view.urn, fleet.model.snapshot.urn]
    return pulumi.Output.all(*outs)


def models_readonly(g) -> str:
    [models] = [d for d in g.inputs["storage-datasets"]["datasets"] if d["duty"] == "models"]
    return models["properties"]["readonly"]


def test_the_wheels_tarball_is_there():
    """`make setup` fetches it; the layer refuses to build without it."""
    assert (ROOT / WHEELS_TARBALL).is_file(), "run `make setup`: it fetches the model downloader's wheels"


@pulumi.runtime.test
def test_the_layer_declares_its_resources_on_the_storage_host_in_order(model_graph):
    g = model_graph
    fleet = build(stack())
    assert fleet.model is not None

    def check(_):
        assert "gpu-fleet:index:Fleet$gpu-fleet:model:ModelSnapshot" in g.chains
        for name, typ in MODEL_TYPES.items():
            assert g.types.get(name) == {typ}, name
            assert g.chain[name] == f"gpu-fleet:model:ModelSnapshot${typ}", name
            assert g.inputs[name]["conn"]["name"] == "storage", name
        # the component and the Snapshot share a name, under different types
        assert g.types["model-snapshot"] == {"gpu-fleet:model:ModelSnapshot", "pulumi-python:dynamic/model:Snapshot"}
        # datasets, wheels, venv, scripts and config, the unit, the snapshot, then every node's view
        assert g.before("storage-datasets", "model-downloader-wheels")
        assert "model-downloader-wheels" in g.deps["model-downloader-venv"]
        for f in ("download-py", "verify-py", "publish-sh", "config", "token"):
            assert "model-downloader-venv" in g.deps[f"model-downloader-{f}"], f
            assert f"model-downloader-{f}" in g.deps["model-downloader-unit"], f
        assert "model-downloader-unit" in g.deps["model-snapshot"]
        assert {"model-snapshot", "storage-clients"} <= g.deps["model-snapshot-view"]
        # the final acceptance waits for every node's view; the canary-first gate does not
        assert g.before("model-snapshot-view", "fleet-acceptance")
        assert not g.before("model-snapshot", "canary-first")
        assert not g.before("model-downloader-wheels", "canary-first")

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_what_the_resources_hold(model_graph):
    g = model_graph
    fleet = build(stack())

    def check(_):
        unit = g.inputs["model-downloader-unit"]
        assert unit["name"] == render.UNIT and unit["enabled"] is False and unit["active"] is False
        assert unit["content"].startswith(f"# {render.HEADER}")
        token = g.inputs["model-downloader-token"]
        assert (token["path"], token["mode"], token["secret"]) == (render.TOKEN, "0600", True)
        config = g.inputs["model-downloader-config"]
        assert config["path"] == render.CONFIG and json.loads(config["content"])["token_file"] == render.TOKEN
        assert TOKEN not in config["content"]
        for name, path in (("download-py", "download.py"), ("verify-py", "verify.py"), ("publish-sh", "publish.sh")):
            f = g.inputs[f"model-downloader-{name}"]
            assert (f["path"], f["mode"]) == (f"{render.HOME}/{path}", "0755"), name
        venv = g.inputs["model-downloader-venv"]
        assert venv["delete"] == ["rm", "-rf", "--", render.VENV]
        assert venv["verify"][0] == f"{render.VENV}/bin/python"
        s = g.snapshot_inputs
        assert (s["repo_id"], s["revision"], s["unit"], s["marker"]) == ("org/tiny", REV, render.UNIT,
                                                                         "model_index.json")
        assert s["dest"] == f"/srv/ai/models/org/tiny/{REV}"
        assert s["manifest"] == f"/srv/ai/models/org/tiny/{REV}/{render.MANIFEST}"
        assert s["stage"] == f"/srv/ai/models/.staging/org/tiny/{REV}"
        view = g.inputs["model-snapshot-view"]
        assert (view["path"], view["marker"]) == (SNAP, "model_index.json")
        assert view["on"] == ["gpu01", "gpu02"]          # the nodes the storage layer passed
        assert view["files"] == FILES                   # what the Snapshot's manifest lists
        assert sorted(n["name"] for n in view["nodes"]) == ["gpu01", "gpu02", "gpu03"]  # every Slurm node

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_the_payload_records_a_sha256_and_no_bytes(model_graph):
    g = model_graph
    fleet = build(stack())
    tarball = ROOT / WHEELS_TARBALL
    want = hashlib.sha256(tarball.read_bytes()).hexdigest()

    def check(_):
        w = g.inputs["model-downloader-wheels"]
        assert w["path"] == render.WHEELS and w["source"] == str(tarball)
        assert w["source_sha256"] == want and len(w["source_sha256"]) == 64
        assert "content" not in w
        assert len(json.dumps(w)) < 2000 < tarball.stat().st_size
        # the venv is made again when the wheels change
        assert g.inputs["model-downloader-venv"]["triggers"] == {"wheels": want}

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_the_final_acceptance_reads_the_snapshots_marker_the_canary_gate_the_stores(model_graph):
    g = model_graph
    fleet = build(stack())
    assert fleet.model.job_paths.marker == f"{SNAP}/model_index.json"

    def check(_):
        job = g.inputs["fleet-acceptance"]
        assert (job["marker"], job["job_root"], job["readonly_probe"]) == (
            f"{SNAP}/model_index.json", "/mnt/data/jobs", SNAP)
        first = g.inputs["canary-first"]
        assert (first["marker"], first["job_root"], first["readonly_probe"]) == (
            "/mnt/models/.gpu-fleet-store", "/mnt/data/jobs", "/mnt/models")

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_a_custom_marker(model_graph):
    g = model_graph
    fleet = build(stack({**MODEL, "marker": "unet/config.json"}))

    def check(_):
        assert g.inputs["fleet-acceptance"]["marker"] == f"{SNAP}/unet/config.json"
        assert g.inputs["model-snapshot-view"]["marker"] == "unet/config.json"

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_the_models_dataset_is_writable_on_the_storage_host_with_the_layer(model_graph):
    g = model_graph
    fleet = build(stack())

    def check(_):
        assert models_readonly(g) == "off"
        [data] = [d for d in g.inputs["storage-datasets"]["datasets"] if d["duty"] == "data"]
        assert data["properties"]["readonly"] == "off"

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_without_the_layer_the_models_dataset_stays_read_only(model_graph):
    g = model_graph
    fleet = build(stack(None), token=False)
    assert fleet.model is None

    def check(_):
        assert models_readonly(g) == "on"
        assert not any(n.startswith("model-") for n in g.inputs)
        assert g.inputs["fleet-acceptance"]["marker"] == "/mnt/models/.gpu-fleet-store"

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_a_disabled_section_is_the_same_as_none(model_graph):
    g = model_graph
    fleet = build(stack({**MODEL, "enabled": False}), token=False)
    assert fleet.model is None

    def check(_):
        assert models_readonly(g) == "on" and not any(n.startswith("model-") for n in g.inputs)

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_without_a_token_no_token_file(model_graph):
    g = model_graph
    fleet = build(stack(), token=False)

    def check(_):
        assert "model-downloader-token" not in g.inputs
        assert json.loads(g.inputs["model-downloader-config"]["content"])["token_file"] is None
        assert "model-downloader-token" not in g.deps["model-downloader-unit"]

    return settled(fleet).apply(check)


@pulumi.runtime.test
def test_the_stack_output(model_graph):
    fleet = build(stack())

    def check(out):
        assert out == {"manifestSha256": "ab" * 32, "checks": {"problems": []},
                       "download": {"ran_this_up": True}, "seenBy": None}

    return fleet.model.exports()["modelSnapshot"].apply(check)
