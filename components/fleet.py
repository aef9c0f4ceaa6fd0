"""The root component: one Fleet per stack, each layer a child component."""

from __future__ import annotations

import pulumi

from .config import FleetConfig
from .inventory import Inventory, fleet_summary


class Fleet(pulumi.ComponentResource):
    """Brings the configured fleet up layer by layer; `pulumi destroy` unwinds it in reverse."""

    def __init__(self, name: str, cfg: FleetConfig, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:index:Fleet", name, None, opts)
        self.cfg = cfg
        self.inventory = Inventory(cfg, pulumi.ResourceOptions(parent=self))
        self.summary = fleet_summary(cfg)
        self.register_outputs({"summary": self.summary})
