"""gpu-fleet policy pack: `pulumi preview --policy-pack policies` (see README.md here)."""

from gpu_fleet_policies import engine
from gpu_fleet_policies.pack import PACK_NAME, declared_levels, policies
from pulumi_policy import EnforcementLevel, PolicyPack

engine.install(declared_levels())

PolicyPack(
    name=PACK_NAME,
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=policies(),
)
