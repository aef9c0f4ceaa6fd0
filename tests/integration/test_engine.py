"""The real Pulumi engine: pinned version, offline previews, config errors before any resource."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
import yaml

from tests.conftest import fleet14
from tests.pulumi_cli import ROOT, pinned_versions


def test_cli_version_is_the_pin(project):
    assert project.run("version").stdout.strip() == pinned_versions()["PULUMI_VERSION"]


def test_python_sdk_pin_matches_exec_script():
    req = (ROOT / "requirements.txt").read_text()
    sdk = re.search(r"^pulumi==(\S+)$", req, re.M).group(1)
    assert pinned_versions()["PYTHON_SDK_VERSION"] == f"v{sdk}"


def write_fleet14(project) -> str:
    """The full fleet once K3s retirement has handed its nodes over (tests/conftest.fleet14)."""
    project.write_stack("fleet14", yaml.safe_dump({"config": fleet14()}))
    return "fleet14"


@pytest.mark.parametrize(
    "stack,hosts",
    [
        ("canary", {"storage", "gpu01"}),
        ("fleet14", {"storage"} | {f"gpu{i:02d}" for i in range(1, 16)}),
    ],
)
def test_stack_previews_offline(project, stack, hosts):
    if stack == "fleet14":
        write_fleet14(project)
    project.init_stack(stack)
    out = project.preview_json(stack)
    steps = out["steps"]
    assert {s["op"] for s in steps} == {"create"}
    types = [s["newState"]["type"] for s in steps]
    assert types.count("gpu-fleet:index:Fleet") == 1
    got = {s["urn"].rsplit("::", 1)[1] for s in steps if s["newState"]["type"] == "gpu-fleet:inventory:Host"}
    assert got == hosts
    # Every Host is a child of the inventory, itself a child of the Fleet.
    parents = {s["newState"].get("parent", "").rsplit("::", 1)[-1] for s in steps
               if s["newState"]["type"] == "gpu-fleet:inventory:Host"}
    assert parents == {"inventory"}


def test_full_fleet_summary_output(project):
    project.init_stack(write_fleet14(project))
    text = project.run("preview", "--stack", "fleet14", "--diff").stdout
    assert re.search(r"slurm_gpus\s*:\s*112", text), text
    assert re.search(r"slurm_memory_mib\s*:\s*2576000", text), text


def test_full_stack_previews_its_k3s_retirement_before_slurm_takes_the_nodes(project):
    """The committed full stack retires 12 K3s nodes: one audit, a preserve and a stop per node,
    one seal; every retired node's Slurm resources wait on its stop."""
    project.init_stack("full")
    p = project.run("preview", "--stack", "full", "--json", check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    steps = json.loads(p.stdout)["steps"]
    kinds = [s["newState"]["type"] for s in steps if s.get("newState")]
    assert kinds.count("pulumi-python:dynamic/k3s:Audit") == 1
    assert kinds.count("pulumi-python:dynamic/k3s:Preserve") == 12
    assert kinds.count("pulumi-python:dynamic/k3s:Seal") == 1
    assert kinds.count("pulumi-python:dynamic/k3s:Stop") == 12
    by_urn = {s["urn"]: s["newState"] for s in steps if s.get("newState")}

    def urn(name: str) -> str:
        return next(u for u in by_urn if u.endswith("::" + name))

    server = by_urn[urn("gpu03-k3s-stop")]
    assert {urn(f"gpu{i:02d}-k3s-stop") for i in range(4, 15)} <= set(server["dependencies"])
    # batches of 4: gpu08..gpu11 wait on gpu04..gpu07
    assert set(by_urn[urn("gpu08-k3s-stop")]["dependencies"]) >= {urn(f"gpu{i:02d}-k3s-stop") for i in range(4, 8)}
    assert urn("gpu04-k3s-stop") not in by_urn[urn("gpu05-k3s-stop")]["dependencies"]
    assert urn("gpu05-k3s-stop") in by_urn[urn("gpu05-accounts")]["dependencies"]
    assert urn("gpu05-k3s-stop") in by_urn[urn("gpu05-slurm-apt-source")]["dependencies"]


def failed_preview(project, stack: str, mutate) -> str:
    """Preview a copy of the full stack changed by `mutate`; it must fail. Returns its output."""
    raw = {"config": fleet14()}
    mutate(raw["config"])
    project.write_stack(stack, yaml.safe_dump(raw))
    project.init_stack(stack)
    p = project.run("preview", "--stack", stack, check=False)
    text = p.stdout + p.stderr
    assert p.returncode != 0, text
    assert "Traceback" not in text
    # The program stopped before declaring anything: no Fleet in the plan.
    assert "gpu-fleet:index:Fleet" not in text
    return text


def test_invalid_config_fails_preview_naming_file_and_field(project):
    def mutate(c):
        c["gpu-fleet:nodes"][2]["gpus"]["count"] = 0
        c["gpu-fleet:nodse"] = []

    text = failed_preview(project, "broken", mutate)
    assert "stacks/Pulumi.broken.yaml: gpu-fleet:nodes[2] (gpu03).gpus.count: a GPU node needs" in text
    assert "stacks/Pulumi.broken.yaml: gpu-fleet:nodse: unknown field" in text


def test_cross_field_error_fails_preview(project):
    def mutate(c):
        c["gpu-fleet:slurm"]["partitions"][0]["nodes"].append("gpu15")
        c["gpu-fleet:nodes"][5]["name"] = "gpu05"

    text = failed_preview(project, "dup", mutate)
    assert "stacks/Pulumi.dup.yaml: gpu-fleet:nodes[5] (gpu05).name: duplicate host name 'gpu05'" in text
    assert "node 'gpu15' is unreachable and stays pending" in text


def test_a_nodes_file_stack_previews_as_the_inline_one_and_names_the_file_in_errors(project):
    """`gpu-fleet:nodes_file` (issue 16): the program reads the list from the project root under
    the real engine; the summary carries the file's SHA-256; a bad entry names the file."""
    cfg = fleet14()
    nodes = cfg.pop("gpu-fleet:nodes")
    (project.dir / "stacks" / "nodes.filed.yaml").write_text(yaml.safe_dump({"nodes": nodes}))
    cfg["gpu-fleet:nodes_file"] = "stacks/nodes.filed.yaml"
    project.write_stack("filed", yaml.safe_dump({"config": cfg}))
    project.init_stack("filed")
    text = project.run("preview", "--stack", "filed", "--diff").stdout
    assert re.search(r"slurm_gpus\s*:\s*112", text), text
    sha = hashlib.sha256((project.dir / "stacks" / "nodes.filed.yaml").read_bytes()).hexdigest()
    assert sha in text, text

    def mutate(c):
        c.pop("gpu-fleet:nodes")
        c["gpu-fleet:nodes_file"] = "stacks/nodes.filed.yaml"
    nodes[2]["gpus"]["count"] = 0
    (project.dir / "stacks" / "nodes.filed.yaml").write_text(yaml.safe_dump({"nodes": nodes}))
    text = failed_preview(project, "filed2", mutate)
    assert ("stacks/Pulumi.filed2.yaml: gpu-fleet:nodes_file stacks/nodes.filed.yaml: nodes[2] (gpu03).gpus.count: "
            "a GPU node needs") in text, text
