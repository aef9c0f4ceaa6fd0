"""The accounting layer's rendered files pass the project's own policies."""

from __future__ import annotations

import pytest

from components.layers.accounting.component import render_mariadb_cnf, render_slurmdbd_conf, render_slurmrestd_unit
from gpu_fleet_policies import exposure, secrets

from .fakes import SYSTEMD_UNIT, file_args, resource_args, violations


@pytest.fixture
def cfg(accounting_cfg):
    return accounting_cfg


def test_rendered_accounting_files_pass_the_policies(cfg):
    mariadb = file_args("/etc/mysql/mariadb.conf.d/60-gpu-fleet.cnf", render_mariadb_cnf(cfg.accounting))
    assert violations(exposure.validate_mariadb_loopback, mariadb) == []
    unit = resource_args(SYSTEMD_UNIT, {"name": "slurmrestd.service", "content": render_slurmrestd_unit(cfg.accounting),
                                        "dropins": {}, "enabled": True, "active": True})
    assert violations(exposure.validate_slurmrestd_unix_socket, unit) == []
    plain = file_args("/etc/slurm/slurmdbd.conf", render_slurmdbd_conf(cfg.accounting, cfg.hosts.controller, "pw"), mode="0600",
                      owner="slurm", group="slurm", secret=True)
    assert violations(secrets.validate_content_is_secret, plain)  # plain text is refused




def test_rendered_slurmdbd_firewall_passes_and_an_open_one_does_not(cfg):
    from components.layers.accounting import firewall as fw

    rules = fw.render_ruleset(fw.allowed_sources(cfg.accounting, cfg.hosts, cfg.nodes))
    assert violations(exposure.validate_slurmdbd_firewall, file_args(fw.RULES_PATH, rules)) == []
    wide = fw.render_ruleset(["0.0.0.0/0"])
    got = violations(exposure.validate_slurmdbd_firewall, file_args(fw.RULES_PATH, wide))
    assert len(got) == 1 and "admits 0.0.0.0/0" in got[0] and fw.RULES_PATH in got[0]
    open_ = rules.replace("\t\ttcp dport 6819 reject with tcp reset\n", "")
    got = violations(exposure.validate_slurmdbd_firewall, file_args(fw.RULES_PATH, open_))
    assert len(got) == 1 and "does not end slurmdbd's port 6819" in got[0]
    everyone = rules.replace('iif "lo" accept', "tcp dport 6819 accept")
    got = violations(exposure.validate_slurmdbd_firewall, file_args(fw.RULES_PATH, everyone))
    assert len(got) == 1 and "from every source" in got[0]
