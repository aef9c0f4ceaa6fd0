"""The root component: one Fleet per stack, each layer a child component."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pulumi

from .config import FleetConfig
from .inventory import Inventory, fleet_summary
from .layers.gpu_runtime.component import GpuRuntime
from .layers.slurm.component import SlurmCluster


class Fleet(pulumi.ComponentResource):
    """Brings the configured fleet up layer by layer; `pulumi destroy` unwinds it in reverse."""

    def __init__(self, name: str, cfg: FleetConfig, root: Optional[Path] = None,
                 munge_key: Optional[pulumi.Output[str]] = None,
                 db_password: Optional[pulumi.Output[str]] = None,
                 jwt_key: Optional[pulumi.Output[str]] = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:index:Fleet", name, None, opts)
        self.cfg = cfg
        self.inventory = Inventory(cfg, pulumi.ResourceOptions(parent=self))
        self.summary = fleet_summary(cfg)
        self.gpu = None
        if cfg.gpu_runtime.enabled:
            self.gpu = GpuRuntime.for_stack(cfg, root or Path.cwd(), opts=pulumi.ResourceOptions(parent=self))
        self.slurm = None
        if cfg.slurm.enabled and munge_key is not None:
            self.slurm = SlurmCluster(cfg, self.inventory, munge_key, root or Path.cwd(),
                                      db_password, jwt_key, self.gpu, pulumi.ResourceOptions(parent=self))
        self.register_outputs({"summary": self.summary})
