"""A 14-node full fleet (112 V100) with three teams, as the tenancy tests take it."""

from __future__ import annotations

from tests.conftest import fleet14


def tenancy_raw(**over) -> dict:
    raw = fleet14()
    raw["gpu-fleet:accounting"] = {"enabled": True}
    names = [m for p in raw["gpu-fleet:slurm"]["partitions"] for m in p["nodes"]]
    raw["gpu-fleet:tenancy"] = {
        "enabled": True,
        "teams": [
            {"name": "vision", "guaranteed": {"v100": 48}, "fairshare": 40, "members": ["alice", "carol"]},
            {"name": "speech", "guaranteed": {"v100": 32}, "fairshare": 30, "members": ["bob", "carol"]},
            {"name": "infra", "guaranteed": {"v100": 8}, "fairshare": 10, "members": ["dave"]},
        ],
        "default_team": {"carol": "speech"},
        "opportunistic": {"qos": "scavenger", "max_gpus_per_team": 32, "grace_s": 120, "exempt_s": 300},
        "shards_per_gpu": 4,
        "switches": [{"name": "leaf1", "nodes": names[:7]}, {"name": "leaf2", "nodes": names[7:]}],
        **over,
    }
    return raw
