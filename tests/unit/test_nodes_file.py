"""`gpu-fleet:nodes_file`: a large fleet's node list in a file of its own (issue 16, item 3).

The language host passes the whole stack config in one environment string, which Linux caps
at 128 KiB: about 660 nodes of the `full` shape inline. The file holds the same list, is
validated by the same model, and every problem in it names the stack, the file, the entry and
the field."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest
import yaml

from components.config.load import parse_fleet_config
from components.errors import ConfigError
from components.inventory import fleet_summary
from tests.conftest import stack_config


def with_file(tmp_path, nodes, name="nodes.big.yaml"):
    raw = copy.deepcopy(stack_config("canary"))
    f = tmp_path / "stacks" / name
    f.parent.mkdir(exist_ok=True)
    f.write_text(yaml.safe_dump({"nodes": nodes}))
    inline = raw.pop("gpu-fleet:nodes")
    raw["gpu-fleet:nodes_file"] = f"stacks/{name}"
    return raw, inline, f


def problems(raw, tmp_path) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_fleet_config(raw, "stacks/Pulumi.big.yaml", tmp_path)
    return e.value.problems


def test_the_file_gives_the_same_fleet_as_the_inline_list(tmp_path):
    raw = copy.deepcopy(stack_config("canary"))
    inline = parse_fleet_config(copy.deepcopy(raw), "canary", tmp_path)
    raw2, nodes, f = with_file(tmp_path, raw["gpu-fleet:nodes"])
    cfg = parse_fleet_config(raw2, "stacks/Pulumi.big.yaml", tmp_path)
    assert cfg.nodes == inline.nodes
    sha = hashlib.sha256(f.read_bytes()).hexdigest()
    assert fleet_summary(cfg)["nodes_file"] == {"path": "stacks/nodes.big.yaml", "sha256": sha}
    assert "nodes_file" not in fleet_summary(inline)


def test_a_bad_entry_names_the_file_the_entry_and_the_field(tmp_path):
    nodes = copy.deepcopy(stack_config("canary")["gpu-fleet:nodes"])
    nodes[0]["cpus"] = 0
    raw, _, _ = with_file(tmp_path, nodes)
    [p] = problems(raw, tmp_path)
    name = nodes[0]["name"]
    assert p.startswith(f"gpu-fleet:nodes_file stacks/nodes.big.yaml: nodes[0] ({name}).cpus: "), p


def test_a_cross_check_about_a_node_names_the_file_too(tmp_path):
    nodes = copy.deepcopy(stack_config("canary")["gpu-fleet:nodes"])
    nodes.append(dict(nodes[0]))
    raw, _, _ = with_file(tmp_path, nodes)
    ps = problems(raw, tmp_path)
    n, name = len(nodes) - 1, nodes[0]["name"]
    assert ps[0].startswith(f"gpu-fleet:nodes_file stacks/nodes.big.yaml: nodes[{n}] ({name}).name: duplicate "
                            f"host name '{name}'"), ps


@pytest.mark.parametrize("text, needle", [
    (None, "cannot read stacks/nodes.big.yaml"),
    ("nodes: [\n", "is not YAML"),
    (json.dumps([{"name": "x"}]), "must hold one key, `nodes`"),
    ("nodes: {a: 1}\n", "must hold one key, `nodes`"),
])
def test_a_missing_or_malformed_file_is_one_clear_problem(tmp_path, text, needle):
    raw, _, f = with_file(tmp_path, [])
    if text is None:
        f.unlink()
    else:
        f.write_text(text)
    [p] = problems(raw, tmp_path)
    assert p.startswith("gpu-fleet:nodes_file: ") and needle in p, p


def test_nodes_inline_and_a_file_together_are_refused(tmp_path):
    raw, inline, _ = with_file(tmp_path, stack_config("canary")["gpu-fleet:nodes"])
    raw["gpu-fleet:nodes"] = inline
    [p] = problems(raw, tmp_path)
    assert p == "gpu-fleet:nodes_file: set together with gpu-fleet:nodes; keep the node list in one place"


def test_a_path_with_spaces_or_dots_up_is_refused(tmp_path):
    raw, _, _ = with_file(tmp_path, [])
    raw["gpu-fleet:nodes_file"] = "../elsewhere/nodes.yaml"
    [p] = problems(raw, tmp_path)
    assert p.startswith("gpu-fleet:nodes_file: '../elsewhere/nodes.yaml' is not a path on this machine"), p
