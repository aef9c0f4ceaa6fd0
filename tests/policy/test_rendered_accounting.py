"""The accounting layer's rendered files pass the project's own policies."""

from __future__ import annotations

import pytest

from components.accounting import render_mariadb_cnf, render_slurmdbd_conf, render_slurmrestd_unit
from gpu_fleet_policies import exposure, secrets

from .fakes import SYSTEMD_UNIT, file_args, resource_args, violations


@pytest.fixture
def cfg(accounting_cfg):
    return accounting_cfg


def test_rendered_accounting_files_pass_the_policies(cfg):
    mariadb = file_args("/etc/mysql/mariadb.conf.d/60-gpu-fleet.cnf", render_mariadb_cnf(cfg))
    assert violations(exposure.validate_mariadb_loopback, mariadb) == []
    unit = resource_args(SYSTEMD_UNIT, {"name": "slurmrestd.service", "content": render_slurmrestd_unit(cfg),
                                        "dropins": {}, "enabled": True, "active": True})
    assert violations(exposure.validate_slurmrestd_unix_socket, unit) == []
    plain = file_args("/etc/slurm/slurmdbd.conf", render_slurmdbd_conf(cfg, "pw"), mode="0600",
                      owner="slurm", group="slurm", secret=True)
    assert violations(secrets.validate_content_is_secret, plain)  # plain text is refused


