"""The storage layer's config: separate duties, the pool's datasets, a client network that
holds every Slurm node and is never everyone."""

from __future__ import annotations

import pytest

from components.config.load import parse_fleet_config
from components.errors import ConfigError

STORE = {"enabled": True, "clients": "192.0.2.0/24"}


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(raw, "stacks/Pulumi.canary.yaml")
    return exc.value.problems


def test_defaults_are_the_seeds_layout(canary_config):
    canary_config["gpu-fleet:storage"] = STORE
    st = parse_fleet_config(canary_config, "canary").storage
    assert (st.pool, st.models.dataset, st.data.dataset) == ("ai", "ai/models", "ai/data")
    assert (st.models.client_mount, st.data.client_mount) == ("/mnt/models", "/mnt/data")
    assert st.data_dirs == ["jobs", "inputs", "outputs"]
    assert (st.server, st.client) == ("kernel", "kernel")


def test_off_by_default(canary_config):
    assert parse_fleet_config(canary_config, "canary").storage.enabled is False


@pytest.mark.parametrize("section, expected", [
    ({"enabled": True}, "gpu-fleet:storage.clients: required"),
    ({**STORE, "clients": "0.0.0.0/0"}, "gpu-fleet:storage.clients: 0.0.0.0/0 is every address"),
    ({**STORE, "clients": "198.51.100.0/24"},
     "gpu-fleet:nodes[0] (gpu01).address: 192.0.2.21 is outside storage.clients"),
    ({**STORE, "models": {"dataset": "tank/models", "mountpoint": "/srv/m", "client_mount": "/mnt/m"}},
     "gpu-fleet:storage.models.dataset: 'tank/models' is not a dataset of the pool 'ai'"),
    ({**STORE, "data": {"dataset": "ai/data", "mountpoint": "/srv/ai/models/data", "client_mount": "/mnt/d"}},
     "gpu-fleet:storage.data.mountpoint: '/srv/ai/models/data' and storage.models.mountpoint"),
    ({**STORE, "data": {"dataset": "ai/data", "mountpoint": "/srv/ai/data", "client_mount": "/mnt/models"}},
     "gpu-fleet:storage.data.client_mount: '/mnt/models' and storage.models.client_mount"),
    ({**STORE, "data_dirs": ["jobs", "jobs"]}, "gpu-fleet:storage.data_dirs: a directory is listed twice"),
    ({**STORE, "data_dirs": [".."]}, "gpu-fleet:storage.data_dirs[0]:"),
    ({**STORE, "pool": "ai; zpool destroy ai"}, "gpu-fleet:storage.pool:"),
    ({**STORE, "server": "samba"}, "gpu-fleet:storage.server:"),
])
def test_bad_storage_config_is_refused_naming_the_field(canary_config, section, expected):
    canary_config["gpu-fleet:storage"] = section
    got = problems_of(canary_config)
    assert any(p.startswith(expected) for p in got), got
