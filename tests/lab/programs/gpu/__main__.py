"""A GpuRuntime on the given lab nodes; the stack outputs are what the Slurm layer would use.

Config (JSON): `nodes` (NodeSpec dicts), `conns` (node name -> conn input), `probe_paths`
(the lab's test double lays out kernel facts there), optional `layer` (GpuRuntimeLayer
fields) and `triggers`. Driven by tests/lab/test_gpu_runtime.py.
"""

import json

import pulumi

from components.config.hosts import NodeSpec
from components.layers.gpu_runtime.config import GpuRuntimeLayer
from components.layers.gpu_runtime.component import GpuRuntime

cfg = pulumi.Config()
nodes = [NodeSpec(**n) for n in json.loads(cfg.require("nodes"))]
conns = json.loads(cfg.require("conns"))
layer = GpuRuntimeLayer(**json.loads(cfg.get("layer") or "{}"))

gpu = GpuRuntime("gpu", [(n, conns.get(n.name, {"name": n.name, "address": n.address}))
                         for n in nodes], layer,
                 probe_paths=json.loads(cfg.get("probe_paths") or "{}"),
                 triggers=json.loads(cfg.get("triggers") or "{}"))

pulumi.export("healthy_nodes", gpu.healthy_nodes)
pulumi.export("verdicts", gpu.verdicts)
pulumi.export("problems", gpu.problems)
pulumi.export("failed_nodes", gpu.failed_nodes)
pulumi.export("pynvml", gpu.pynvml)
