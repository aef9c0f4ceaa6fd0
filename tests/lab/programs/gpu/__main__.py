"""A GpuRuntime on the given lab nodes; the stack outputs are what the Slurm layer would use.

Config (JSON): `nodes` (NodeSpec dicts), `conns` (node name -> conn input; the lab's are alike
but for the address, so they give the site's SSH settings), `probe_paths` (the lab's test double
lays out kernel facts there), optional `layer` (GpuRuntimeLayer fields) and `triggers`. Driven
by tests/lab/test_gpu_runtime.py.
"""

import json
from pathlib import Path

import pulumi

from components.config.hosts import Hosts, HostSpec, NodeSpec, SshSpec
from components.layers.gpu_runtime.component import GpuRuntime, GpuRuntimeInputs
from components.layers.gpu_runtime.config import GpuRuntimeLayer
from components.site import Site

cfg = pulumi.Config()
nodes = [NodeSpec(**n) for n in json.loads(cfg.require("nodes"))]
conns = json.loads(cfg.require("conns"))
layer = GpuRuntimeLayer(**{**json.loads(cfg.get("layer") or "{}"),
                           "probe_paths": json.loads(cfg.get("probe_paths") or "{}")})
one = next(iter(conns.values()))
ssh = SshSpec(user=one["user"], identity_file=one["identity_file"], known_hosts_file=one["known_hosts_file"],
              use_ssh_config=one["use_ssh_config"], connect_timeout_s=one["connect_timeout_s"])
# the layer reaches only the nodes; the site's service hosts are the first node, never contacted
first = HostSpec(name=nodes[0].name, address=nodes[0].address)
site = Site(hosts=Hosts(storage=first, controller=first), nodes=tuple(nodes), ssh=ssh, root=Path.cwd())

gpu = GpuRuntime("gpu", GpuRuntimeInputs(site=site, gpu_runtime=layer,
                                         triggers=json.loads(cfg.get("triggers") or "{}")))

pulumi.export("healthy_nodes", gpu.healthy_nodes)
pulumi.export("verdicts", gpu.verdicts)
pulumi.export("problems", gpu.problems)
pulumi.export("failed_nodes", gpu.failed_nodes)
pulumi.export("pynvml", gpu.pynvml)
