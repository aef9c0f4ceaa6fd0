"""The acceptance's verdict across a controller restart.

Opening the partitions is an `scontrol update`, which slurmctld keeps in memory only: a
controller rebooted for a kernel update, or slurmctld restarted by hand, comes back with the
partitions as slurm.conf declares them, INACTIVE, and the whole fleet closed until an `up`
runs the acceptance again. So opening them records the verdict (slurm/scripts/partitions.sh),
and a oneshot unit bound to slurmctld reopens them after each start, but only for the
configuration the verdict was for: a changed slurm.conf stays closed until an acceptance passes
on it. The unit never closes a partition, and the fleet acceptance's delete withdraws the verdict.
"""

from __future__ import annotations

import pulumi

from ...providers import File, SystemdUnit
from ..slurm.canary import PARTITIONS_INSTALLED, VERDICT
from ..slurm.render import SLURM_ETC

UNIT = "gpu-fleet-partitions.service"
SCRIPT = "/usr/local/libexec/gpu-fleet/partitions.sh"
#: how long the unit waits for a starting slurmctld to answer before leaving the partitions closed
WAIT_S = 120


def render_unit() -> str:
    # BindsTo: stopped whenever slurmctld stops or dies, so every start of slurmctld (by hand,
    # by a restart, at boot through WantedBy) starts it again after it
    return (
        "# gpu-fleet acceptance layer: reopens, after slurmctld starts, the partitions the last\n"
        "# passing acceptance opened, when the Slurm configuration is the one it passed on\n"
        "[Unit]\nDescription=gpu-fleet: reopen the accepted partitions after slurmctld starts\n"
        "BindsTo=slurmctld.service\nAfter=slurmctld.service\n\n"
        "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
        f"ExecStart={SCRIPT} reopen {VERDICT} {SLURM_ETC} {WAIT_S}\nTimeoutStartSec={WAIT_S + 30}\n\n"
        "[Install]\nWantedBy=slurmctld.service\n"
    )


def reopen_unit(conn: dict, host: str, after: list[pulumi.Resource], parent: pulumi.Resource) -> pulumi.Resource:
    """The script and the unit on the controller, once slurmctld serves (`after`: starting a
    unit bound to it starts it); started at once, it opens nothing without a verdict for the
    configuration in place."""
    script = File(f"{host}-partitions-script", conn=conn, path=SCRIPT, content=PARTITIONS_INSTALLED, mode="0755",
                  opts=pulumi.ResourceOptions(parent=parent))
    return SystemdUnit(f"{host}-partitions-unit", conn=conn, unit=UNIT, content=render_unit(),
                       opts=pulumi.ResourceOptions(parent=parent, depends_on=[*after, script]))
