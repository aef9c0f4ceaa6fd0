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


class _Conn:
    def __init__(self, stdout: str):
        self.stdout = stdout

    def run(self, *args, **kw):
        from components.transport.target import Result
        return Result(0, self.stdout, "")


PROPS = {"conn": {"name": "ctl", "address": "10.0.0.1"}, "database": "slurm_acct_db",
         "backup_dir": "/srv/backup", "restored_from": None, "restored_sha256": None,
         "restored_jobs": None}


def test_nothing_restored_is_recorded_as_empty_text_never_null(monkeypatch):
    """A null output is dropped by the engine and read as unknown by the next preview: the
    cluster-ID adoption, which takes restored_from as a trigger, then showed an update on every
    preview of a fleet whose first up restored nothing (seen on the lab)."""
    from components.layers.accounting import history

    for stdout, want in (("fresh no dump in /srv/backup\n", ""), ("kept slurm_acct_db has 40 tables\n", ""),
                         ("restored /srv/backup/d.sql.gz\nsha256 cd\njobs lab_job_table 3\n",
                          "/srv/backup/d.sql.gz")):
        monkeypatch.setattr(history, "connection", lambda t, s=stdout: _Conn(s))
        outs = history.AccountingHistoryProvider().create(dict(PROPS)).outs
        assert outs["restored_from"] == want, stdout
        assert outs["restored_sha256"] == ("cd" if want else "")
        assert None not in (outs["restored_from"], outs["restored_sha256"])


def test_refresh_turns_an_older_states_null_into_empty_text_without_a_host():
    from components.layers.accounting.history import AccountingHistoryProvider

    old = {**PROPS, "restored_jobs": {}}
    outs = AccountingHistoryProvider().read("ctl:slurm_acct_db", old).outs
    assert outs["restored_from"] == "" and outs["restored_sha256"] == ""
    kept = {**old, "restored_from": "/srv/backup/d.sql.gz", "restored_sha256": "cd"}
    assert AccountingHistoryProvider().read("ctl:slurm_acct_db", kept).outs["restored_from"] == "/srv/backup/d.sql.gz"
