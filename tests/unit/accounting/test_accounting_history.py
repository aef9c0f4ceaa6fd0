"""The accounting history's scripts and their report lines (pure parts; the lab runs them)."""

import subprocess

from components.layers.accounting.history import _BACKUP, _RESTORE, parse_lines
from components.layers.slurm.component import restart_key


def test_backup_report_lines():
    out = ("dump /b/slurm_acct_db-20261130T073000Z.sql.gz\nsha256 ab12\nsource tables 42\n"
           "source jobs lab_job_table 7 19\ndropped slurm_acct_db\n")
    got = parse_lines(out)
    assert got["dump"] == "/b/slurm_acct_db-20261130T073000Z.sql.gz"
    assert got["sha256"] == "ab12" and got["dropped"] == "slurm_acct_db"
    assert got["jobs"] == {"lab_job_table": 7}


def test_refusal_and_restore_lines():
    assert parse_lines("refused /b/x.sql.gz has SHA-256 1, the backup recorded 2\n")["refused"] \
        == "/b/x.sql.gz has SHA-256 1, the backup recorded 2"
    got = parse_lines("restored /b/x.sql.gz\nsha256 cd\njobs lab_job_table 12\n")
    assert got["restored"] == "/b/x.sql.gz" and got["jobs"] == {"lab_job_table": 12}


def test_scripts_are_valid_bash():
    for script in (_BACKUP, _RESTORE):
        subprocess.run(["bash", "-n", "-c", script], check=True)


def test_switching_accounting_plugins_restarts_daemons():
    base = "NodeName=n1 CPUs=2\nPartitionName=p Nodes=n1\n"
    with_acct = base + "AccountingStorageType=accounting_storage/slurmdbd\nAuthAltTypes=auth/jwt\n"
    assert restart_key(base, "", "") != restart_key(with_acct, "", "")
    assert restart_key(base + "DefMemPerCPU=100\n", "", "") == restart_key(base, "", "")
