"""The health layer's lab tests (test_health.py) on Slurm 24.11: the same tests, on the shared
24.11 stack (conftest `release24`), with the guards and the health check turned on over a running
fleet instead of in its first `up`. The module turns both off again and leaves the stack as it
found it (test_v2411_tenancy runs next).
"""

from __future__ import annotations

import pytest

from .labhosts import ssh
from .test_health import finish, set_sections, start, up
from .test_health import (  # noqa: F401  collected here, with this module's `healthy`
    test_slurmd_runs_the_check_on_every_node,
    test_a_second_up_changes_nothing_and_a_refresh_records_the_health,
    test_an_xid_reboots_node2_through_slurm_and_it_comes_back_with_no_human_step,
    test_a_fault_that_survives_the_reboot_puts_node2_in_quarantine,
    test_a_manual_resume_of_a_failing_node_is_drained_again_within_one_interval,
    test_a_spare_stands_in_for_node2_in_a_lent_reservation,
)


@pytest.fixture(scope="module")
def healthy(release24):
    proj = release24
    assert ssh("ctl", "slurmctld -V").stdout.split() == ["slurm-wlm", "24.11.5"]
    proj.log.unlink(missing_ok=True)
    try:
        start(proj)
        yield proj
    finally:
        finish(proj)
        set_sections(proj, False)
        up(proj)
        conf = ssh("ctl", "cat /etc/slurm/slurm.conf").stdout
        assert "HealthCheckProgram" not in conf and "Weight=" not in conf
        assert ssh("ctl", "scontrol show reservation train", check=False).returncode != 0
