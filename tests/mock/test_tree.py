"""The component tree under pulumi's mocks: what each stack declares, offline."""

from __future__ import annotations

import pulumi
import pytest

from components.config.load import parse_fleet_config
from components.fleet import Fleet


class Recorder(pulumi.runtime.Mocks):
    """Records every registered resource (components included); returns inputs as state."""

    def __init__(self) -> None:
        self.urns: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.urns.append(f"{args.typ}::{args.name}")
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs):
        raise AssertionError(f"no invoke expected in an offline tree, got {args.token}")


@pytest.fixture
def mocks():
    rec = Recorder()
    pulumi.runtime.set_mocks(rec, project="gpu-fleet", stack="test", preview=True)
    yield rec
    pulumi.runtime.settings.reset_options()


def build(raw: dict, mocks: Recorder) -> tuple[Fleet, list[str]]:
    cfg = parse_fleet_config(raw, "stacks/Pulumi.test.yaml")
    fleet = Fleet("test", cfg)
    return fleet, mocks.urns


def registered(fleet: Fleet) -> pulumi.Output:
    """Resolves once every resource of the tree has been registered."""
    return pulumi.Output.all(fleet.urn, fleet.inventory.urn, *[h.urn for h in fleet.inventory.hosts.values()])


@pulumi.runtime.test
def test_full_tree(fleet14_config, mocks):
    fleet, urns = build(fleet14_config, mocks)

    def check(_):
        hosts = sorted(u.split("::")[1] for u in urns if u.startswith("gpu-fleet:inventory:Host::"))
        assert hosts == sorted(["storage"] + [f"gpu{i:02d}" for i in range(1, 16)])
        assert urns.count("gpu-fleet:index:Fleet::test") == 1
        assert urns.count("gpu-fleet:inventory:Inventory::inventory") == 1

    return registered(fleet).apply(check)


@pulumi.runtime.test
def test_host_outputs_record_owner_and_membership(fleet14_config, mocks):
    fleet, _ = build(fleet14_config, mocks)
    host = fleet.inventory.hosts
    assert host["gpu15"].record.owner == "unreachable" and not host["gpu15"].record.in_slurm
    assert host["gpu05"].record.owner == "slurm" and host["gpu05"].record.in_slurm
    assert host["storage"].record.roles == ("storage", "controller")
    assert host["gpu01"].record.roles == ("compute", "canary")
    assert fleet.summary["slurm_gpus"] == 112


@pulumi.runtime.test
def test_canary_tree_is_small(canary_config, mocks):
    fleet, urns = build(canary_config, mocks)
    assert sorted(fleet.inventory.hosts) == ["gpu01", "storage"]

    def check(_):
        assert sorted(u for u in urns if u.startswith("gpu-fleet:inventory:Host::")) == [
            "gpu-fleet:inventory:Host::gpu01", "gpu-fleet:inventory:Host::storage",
        ]

    return registered(fleet).apply(check)
