"""The host scripts whose branches decide whether to touch a live daemon or its data, run as
the code runs them (`sh -c <text> sh <args>`, `bash -c` for the history scripts) against
stub commands on PATH that record their calls."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from components.layers.accounting import cluster_id, history
from components.layers.accounting import component as accounting
from components.layers.slurm import component as slurm_component
from components.layers.web.remote import TOKEN_START, bash
from components.layers.web.render import TOKEN_UNIT
from components.kit import sh

RECONFIGURE = slurm_component._RECONFIGURE

WRITTEN = datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)  # slurm.conf's mtime
BEFORE, AFTER = WRITTEN - timedelta(minutes=5), WRITTEN + timedelta(minutes=5)


class Stubs:
    """Commands written as small sh scripts into a directory put first on PATH; each records
    `<name> <args>` in a log, then runs its body (which may read the test's env)."""

    def __init__(self, root: Path):
        self.bin = root / "bin"
        self.bin.mkdir()
        self.log = root / "calls.log"
        self.log.touch()

    def add(self, name: str, body: str = "") -> None:
        p = self.bin / name
        p.write_text(f'#!/bin/sh\necho "{name} $*" >> "$STUB_LOG"\n{body}\n')
        p.chmod(0o755)

    def run(self, argv: list, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess:
        full = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "STUB_LOG": str(self.log),
                "TZ": "UTC", "LC_ALL": "C", **env}
        return subprocess.run([str(a) for a in argv], env=full, capture_output=True, text=True,
                              timeout=30, input=stdin)

    def calls(self, name: str = "") -> list[str]:
        return [c for c in self.log.read_text().splitlines() if c.split(" ", 1)[0] == name or not name]


@pytest.fixture
def stubs(tmp_path) -> Stubs:
    return Stubs(tmp_path)


# ---- slurm/scripts/reconfigure.sh --------------------------------------------------------

def reconfigure(stubs: Stubs, ctl: datetime, slurmd: list[str], agent_queue: str = "0"):
    """Run reconfigure.sh: slurm.conf written half a second into WRITTEN's second, slurmctld
    active since `ctl` (both as finely as `stat` and systemd give them), and `scontrol show
    node -o` giving each node the SlurmdStartTime in `slurmd` (whole seconds, as Slurm's)."""
    stubs.add("stat", f"echo {WRITTEN.timestamp() + 0.5:.9f}")
    stubs.add("systemctl", f"echo '{ctl.strftime('%a %Y-%m-%d %H:%M:%S.%f UTC')}'")
    nodes = "\n".join(f"NodeName=gpu{i:02d} Arch=x86_64 SlurmdStartTime={t} State=IDLE"
                      for i, t in enumerate(slurmd))
    stubs.add("scontrol", f'[ "$1 $2" = "show node" ] && cat <<"EOF"\n{nodes}\nEOF\nexit 0')
    # sdiag reports the queue in $AGENT_QUEUE, then 0 once `sleep` has been called once
    stubs.add("sdiag", f'if grep -q "^sleep" "$STUB_LOG"; then q=0; else q={agent_queue}; fi\n'
                       'echo "Agent queue size:  $q"')
    stubs.add("sleep")
    res = stubs.run(sh(RECONFIGURE, "/etc/slurm/slurm.conf"))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    return res, [c for c in stubs.calls("scontrol") if c != "scontrol show node -o"]


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def test_reconfigure_skipped_when_every_daemon_started_after_the_write(stubs):
    res, calls = reconfigure(stubs, AFTER, [iso(AFTER), iso(AFTER + timedelta(seconds=30))])
    assert calls == []
    assert "nothing to reconfigure" in res.stdout
    assert stubs.calls("stat") == ["stat -c %.9Y -- /etc/slurm/slurm.conf"]
    assert stubs.calls("systemctl") == [
        "systemctl show -p ActiveEnterTimestamp --value --timestamp=us+utc slurmctld.service"]
    assert stubs.calls("sleep") == [] and stubs.calls("sdiag") == []


def test_reconfigure_once_when_slurmctld_started_before_the_write(stubs):
    _, calls = reconfigure(stubs, BEFORE, [iso(AFTER), iso(AFTER)])
    assert calls == ["scontrol reconfigure"]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_reconfigure_once_when_any_one_slurmd_started_before_the_write(stubs, which):
    times = [iso(AFTER)] * 3
    times[which] = iso(BEFORE)
    _, calls = reconfigure(stubs, AFTER, times)
    assert calls == ["scontrol reconfigure"]


@pytest.mark.parametrize("offset_s, reconfigured", [(0.8, False), (0.2, True)])
def test_slurmctld_in_the_writes_second_is_told_apart_to_the_microsecond(stubs, offset_s, reconfigured):
    """Written at .5 of the second: slurmctld active at .8 runs this file, at .2 it does not."""
    _, calls = reconfigure(stubs, WRITTEN + timedelta(seconds=offset_s), [iso(AFTER)])
    assert calls == (["scontrol reconfigure"] if reconfigured else [])


def test_a_slurmd_started_in_the_writes_second_counts_as_after_it_and_one_a_second_before_not(stubs):
    """Slurm gives a slurmd's start in whole seconds; the layer starts every slurmd after the
    file: one in the file's own second is after it (the first converge's case, where a whole-
    second rule reconfigured ~60 % of runs for nothing)."""
    _, calls = reconfigure(stubs, AFTER, [iso(AFTER), iso(WRITTEN)])
    assert calls == []
    stubs.log.write_text("")
    _, calls = reconfigure(stubs, AFTER, [iso(AFTER), iso(WRITTEN - timedelta(seconds=1))])
    assert calls == ["scontrol reconfigure"]


@pytest.mark.parametrize("bad", ["None", "Unknown", "garbage-time"])
def test_reconfigure_skips_an_unparsable_slurmd_start_time(stubs, bad):
    _, calls = reconfigure(stubs, AFTER, [iso(AFTER), bad])
    assert calls == []
    stubs.log.write_text("")
    _, calls = reconfigure(stubs, AFTER, [bad, iso(BEFORE)])
    assert calls == ["scontrol reconfigure"]  # one unparsable node does not hide another


def test_reconfigure_waits_for_the_agent_queue_to_drain(stubs):
    _, calls = reconfigure(stubs, BEFORE, [iso(AFTER)], agent_queue="3")
    assert calls == ["scontrol reconfigure"]
    assert stubs.calls("sleep") == ["sleep 1", "sleep 2"]
    assert len(stubs.calls("sdiag")) == 2


# ---- accounting/scripts/cluster_id_adopt.sh, cluster_id_restore.sh -------------------------

def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def controller(tmp_path, stubs):
    """A controller state file `lab|111` and a backup directory; systemctl is a stub."""
    state = tmp_path / "state" / "clustername"
    state.parent.mkdir()
    state.write_text("lab|111")
    stubs.add("systemctl")
    return state, tmp_path / "backup"


def test_adopt_keeps_the_controllers_file_and_writes_the_dbd_id(stubs, controller):
    state, backup = controller
    want = sha(state)
    res = stubs.run(sh(cluster_id._ADOPT, state, backup / "clustername.111", want, "lab|222"))
    assert res.returncode == 0, res.stderr
    assert stubs.calls("systemctl") == ["systemctl stop slurmctld.service"]
    assert state.read_text() == "lab|222"
    kept = [line.split(" ", 1)[1] for line in res.stdout.splitlines() if line.startswith("kept ")]
    assert len(kept) == 1 and Path(kept[0]).read_text() == "lab|111" and sha(Path(kept[0])) == want
    assert Path(kept[0]).parent == backup and not list(backup.glob("*.tmp"))


def test_adopt_refuses_a_file_changed_since_it_was_read(stubs, controller):
    state, backup = controller
    res = stubs.run(sh(cluster_id._ADOPT, state, backup / "clustername.111", "0" * 64, "lab|222"))
    assert res.returncode == 3 and "changed since it was read" in res.stderr
    assert state.read_text() == "lab|111" and not backup.exists()


def restore(stubs, state: Path, kept: Path, kept_sha: str, conf: str):
    slurm_conf = kept.parent / "slurm.conf"
    slurm_conf.write_text(conf)
    return stubs.run(sh(cluster_id._RESTORE, state, kept, kept_sha, slurm_conf))


@pytest.fixture
def adopted(controller):
    """After an adoption: the state file says the DBD's id, the kept copy the old one."""
    state, backup = controller
    backup.mkdir()
    kept = backup / "clustername.111.20231114T221320Z"
    kept.write_text("lab|111")
    state.write_text("lab|222")
    return state, kept


def test_restore_puts_the_kept_file_back_once_slurmdbd_is_gone(stubs, adopted):
    state, kept = adopted
    res = restore(stubs, state, kept, sha(kept), "ClusterName=lab\n")
    assert res.returncode == 0, res.stderr
    assert state.read_text() == "lab|111" and kept.exists()
    assert stubs.calls() == []  # slurmctld takes it at its next start; nothing is restarted


def test_restore_refuses_while_slurm_conf_still_uses_slurmdbd(stubs, adopted):
    state, kept = adopted
    res = restore(stubs, state, kept, sha(kept), "AccountingStorageType=accounting_storage/slurmdbd\n")
    assert res.returncode == 5 and state.read_text() == "lab|222"


def test_restore_refuses_a_kept_file_that_does_not_match_its_hash(stubs, adopted):
    state, kept = adopted
    res = restore(stubs, state, kept, "0" * 64, "ClusterName=lab\n")
    assert res.returncode == 4 and state.read_text() == "lab|222"


def test_restore_has_nothing_to_do_without_controller_state(stubs, adopted):
    state, kept = adopted
    res = restore(stubs, state.parent / "gone" / "clustername", kept, sha(kept), "")
    assert res.returncode == 0 and "nothing to restore" in res.stdout


# ---- accounting/scripts/history_backup.sh, history_restore.sh -------------------------------

DB = "slurm_acct_db"
# mariadb answers: $TABLES for the table count of a schema, and a database list without DB
MARIADB = ('case "$*" in\n'
           '  *"SELECT COUNT(*) FROM information_schema.tables"*) echo "${TABLES:-0}";;\n'
           '  *"SHOW DATABASES"*) printf "mysql\\n${DATABASES:-}";;\n'
           'esac')


def run_history(stubs: Stubs, text: str, backup_dir: Path, **env: str):
    stubs.add("mariadb", MARIADB)
    stubs.add("mariadb-dump")
    # as AccountingHistoryProvider runs them
    return stubs.run(["bash", "-c", text, "bash", DB, backup_dir], **env)


def test_backup_refuses_while_slurmdbd_still_runs(stubs, tmp_path):
    stubs.add("systemctl", '[ "$1" = is-active ] && exit 0; exit 0')  # stop "works", still active
    res = run_history(stubs, history._BACKUP, tmp_path / "b", DATABASES=f"{DB}\n")
    assert res.returncode == 3
    assert history.parse_lines(res.stdout)["refused"] == "slurmdbd is still running"
    assert stubs.calls("systemctl") == ["systemctl stop slurmdbd.service",
                                        "systemctl is-active -q slurmdbd.service"]
    assert stubs.calls("mariadb") == [] and stubs.calls("mariadb-dump") == []
    assert not (tmp_path / "b").exists()


def test_backup_of_an_absent_database_dumps_and_drops_nothing(stubs, tmp_path):
    stubs.add("systemctl", '[ "$1" = is-active ] && exit 3; exit 0')
    res = run_history(stubs, history._BACKUP, tmp_path / "b")
    assert res.returncode == 0 and "absent" in history.parse_lines(res.stdout)
    assert stubs.calls("mariadb") == ["mariadb -N -B -e SHOW DATABASES"]
    assert stubs.calls("mariadb-dump") == [] and not (tmp_path / "b").exists()


def test_backup_refuses_when_mariadb_cannot_list_its_databases(stubs, tmp_path):
    """A listing that fails is not an absent database: the backup refuses (exit 3), and
    nothing is dumped or dropped."""
    stubs.add("systemctl", '[ "$1" = is-active ] && exit 3; exit 0')
    stubs.add("mariadb", 'case "$*" in *"SHOW DATABASES"*) echo "ERROR 2002: no socket" >&2; exit 1;; esac')
    stubs.add("mariadb-dump")
    res = stubs.run(["bash", "-c", history._BACKUP, "bash", DB, tmp_path / "b"])
    assert res.returncode == 3, res.stdout + res.stderr
    assert history.parse_lines(res.stdout)["refused"] == "mariadb did not list its databases"
    assert stubs.calls("mariadb-dump") == [] and not (tmp_path / "b").exists()


def test_restore_keeps_a_database_that_has_tables(stubs, tmp_path):
    res = run_history(stubs, history._RESTORE, tmp_path, TABLES="42")
    assert res.returncode == 0 and history.parse_lines(res.stdout)["kept"] == f"{DB} has 42 tables"
    assert len(stubs.calls("mariadb")) == 1  # the count, nothing written


def test_restore_without_a_dump_starts_fresh(stubs, tmp_path):
    (tmp_path / "other_db-20240101T000000Z.sql.gz").write_text("x")
    res = run_history(stubs, history._RESTORE, tmp_path)
    assert res.returncode == 0 and history.parse_lines(res.stdout)["fresh"] == f"no dump in {tmp_path}"


def test_restore_takes_the_newest_dump_and_refuses_it_when_its_hash_differs(stubs, tmp_path):
    for stamp in ("20250101T000000Z", "20240101T000000Z", "20231231T235959Z"):
        dump = tmp_path / f"{DB}-{stamp}.sql.gz"
        dump.write_bytes(b"not really gzip")
        (tmp_path / f"{dump.name}.sha256").write_text(f"{sha(dump)}  {dump.name}\n")
    newest = tmp_path / f"{DB}-20250101T000000Z.sql.gz"
    (tmp_path / f"{newest.name}.sha256").write_text(f"{'0' * 64}  {newest.name}\n")
    res = run_history(stubs, history._RESTORE, tmp_path)
    assert res.returncode == 3
    assert history.parse_lines(res.stdout)["refused"].startswith(f"{newest} has SHA-256 {sha(newest)}")
    assert len(stubs.calls("mariadb")) == 1  # nothing imported, nothing dropped


# ---- accounting/scripts/db_user.sh -------------------------------------------------------

def test_db_user_password_reaches_mariadb_only_as_hex_and_its_hash(stubs):
    """No hand-made quoting: the password is sent hex-encoded to compute its hash, and the
    users are created with that hash; quotes, `$(...)` and backslashes never reach SQL text."""
    pw = "a'b\\$(touch /tmp/owned)\"c;DROP"
    expected = "*" + hashlib.sha1(hashlib.sha1(pw.encode()).digest()).hexdigest().upper()
    # the stub plays MariaDB: it records each SQL text it gets and answers the hash query
    stubs.add("mariadb", 'sql=$(cat); printf "%s\\n--\\n" "$sql" >> "$STUB_SQL"\n'
                         'case "$sql" in *SHA1*) echo "$STUB_HASH";; esac')
    sql_log = stubs.log.with_name("sql.log")
    res = stubs.run(sh(accounting._DB_USER, "slurm_acct_db", "slurm"), stdin=pw + "\n",
                    STUB_SQL=str(sql_log), STUB_HASH=expected)
    assert res.returncode == 0, res.stderr
    first, second = sql_log.read_text().split("\n--\n")[:2]
    assert pw.encode().hex() in first and pw not in first
    assert pw not in second and "'" + expected + "'" in second
    assert second.count("IDENTIFIED BY PASSWORD") == 4


def test_db_user_refuses_an_unexpected_hash(stubs):
    stubs.add("mariadb", 'cat >/dev/null; echo "ERROR 1064"')
    res = stubs.run(sh(accounting._DB_USER, "db", "u"), stdin="pw\n")
    assert res.returncode != 0 and "unexpected password hash" in res.stderr
    assert len(stubs.calls("mariadb")) == 1


# ---- the Slurm layer's release of nodes a new slurm.conf drops ---------------------------------

RELEASE = slurm_component._RELEASE
SHOW_NODES = (
    "NodeName=node1 Arch=x86_64 State=IDLE Reason=(null)\n"
    "NodeName=node2 Arch=x86_64 State=IDLE+DRAIN Reason=gpu-fleet: leaving the cluster [root@2026-12-01T19:00:00]\n"
    "NodeName=node3 Arch=x86_64 State=IDLE+DRAIN Reason=bad disk [admin@2026-12-01T19:00:00]\n")


@pytest.mark.parametrize("conf_nodes, drained, resumed", [
    (["node1", "node2", "node3"], [], ["node2"]),   # back in the conf: our drain undone, the admin's kept
    (["node1", "node3"], ["node2"], []),            # still leaving: drained (again), nothing resumed
])
def test_the_release_drains_what_leaves_and_resumes_only_its_own_drain(tmp_path, conf_nodes, drained, resumed):
    stubs = Stubs(tmp_path)
    (tmp_path / "show").write_text(SHOW_NODES)
    stubs.add("scontrol", f'[ "$1 $2" = "show nodes" ] && cat {tmp_path / "show"}; exit 0')
    stubs.add("squeue", "exit 0")
    stubs.add("systemctl", '[ "$1 $2 $3" = "is-active --quiet slurmctld.service" ]')
    conf = tmp_path / "slurm.conf"
    conf.write_text("".join(f"NodeName={n} NodeAddr=10.0.0.1 CPUs=2\n" for n in conf_nodes))
    p = stubs.run(["bash", "-c", RELEASE, "bash", conf, "5"])
    assert p.returncode == 0, p.stderr
    updates = [c for c in stubs.calls("scontrol") if " update " in f" {c} "]
    assert updates == [f"scontrol update NodeName={n} State=DRAIN Reason=gpu-fleet: leaving the cluster"
                       for n in drained] + [f"scontrol update NodeName={n} State=RESUME" for n in resumed], updates


def test_the_release_asks_nothing_of_a_controller_that_is_not_running(tmp_path):
    """A first install: slurmctld is not active here, so there is nothing to release and no
    scontrol call to wait out its message timeout."""
    stubs = Stubs(tmp_path)
    stubs.add("scontrol", "sleep 30")
    stubs.add("systemctl", "exit 3")
    conf = tmp_path / "slurm.conf"
    conf.write_text("NodeName=node1 NodeAddr=10.0.0.1 CPUs=2\n")
    p = stubs.run(["bash", "-c", RELEASE, "bash", conf, "5"])
    assert p.returncode == 0 and stubs.calls("scontrol") == [], p.stderr


# ---- slurm/scripts/controller_answers.sh ------------------------------------------------------

ANSWERS = slurm_component._ANSWERS


def test_the_nodes_wait_until_slurmctld_answers(stubs, tmp_path):
    """slurmctld is 'active' to systemd before it listens: the wait ends at its first UP."""
    n = tmp_path / "n"
    n.write_text("0")
    stubs.add("scontrol", f'i=$(cat {n}); echo $((i + 1)) > {n}; '
                          'if [ "$i" -ge 2 ]; then echo "Slurmctld(primary) at ctl is UP"; '
                          'else echo "Slurmctld(primary) at ctl is DOWN"; exit 1; fi')
    p = stubs.run(["sh", "-c", ANSWERS, "sh", "20"])
    assert p.returncode == 0 and "is UP" in p.stdout, p.stderr
    assert len(stubs.calls("scontrol")) == 3


def test_a_slurmctld_that_never_answers_fails_the_wait_saying_so(stubs):
    stubs.add("scontrol", 'echo "Slurmctld(primary) at ctl is DOWN"; exit 1')
    p = stubs.run(["sh", "-c", ANSWERS, "sh", "1"])
    assert p.returncode == 1 and "slurmctld does not answer after 1 s" in p.stderr


# ---- providers/scripts/systemd_probe.sh: a mount unit's root is read -------------------------

SHOW_MOUNT = "LoadState=loaded\nActiveState={state}\nUnitFileState=enabled\nNeedDaemonReload=no\nWhere=/mnt/data\n"


@pytest.mark.parametrize("unit, state, stat_body, reach", [
    ("mnt-data.mount", "active", 'echo "stat: cannot statx \'$4\': Stale file handle" >&2; exit 1',
     "stat: cannot statx '/mnt/data/.': Stale file handle"),
    ("mnt-data.mount", "active", "exit 0", "ok"),
    ("mnt-data.mount", "inactive", "exit 1", None),   # not mounted: nothing to read
    ("slurmd.service", "active", "exit 1", None),     # not a mount
    # a stat that does not end (a server gone): not waited on past 5 s, whatever signals it ignores
    ("mnt-data.mount", "active", "trap '' TERM INT; sleep 30", "stat timed out after 5 s"),
])
def test_the_unit_probe_reads_an_active_mounts_root_once_shown(stubs, tmp_path, unit, state, stat_body, reach):
    from components.providers.systemd import _PROBE, parse_unit_probe

    (tmp_path / "show").write_text(SHOW_MOUNT.format(state=state))
    # systemctl prints Where only when asked for it (and only a mount unit has one)
    stubs.add("systemctl", f'case "$*" in show*"-p Where"*) cat {tmp_path / "show"} ;; '
                           f'show*) grep -v ^Where= {tmp_path / "show"} ;; esac')
    stubs.add("stat", stat_body)
    start = time.monotonic()
    p = stubs.run(["sh", "-c", _PROBE.replace("$PROPS", ""), "sh", unit])
    assert time.monotonic() - start < 8
    obs = parse_unit_probe(p.stdout)
    assert obs["reach"] == reach, p.stdout + p.stderr
    assert obs["show"]["ActiveState"] == state
    assert len(stubs.calls("systemctl")) == 1  # one `systemctl show` for states and the mount point
    assert ("-p Where" in stubs.calls("systemctl")[0]) == unit.endswith(".mount")


def test_the_unit_probe_hashes_each_managed_file_as_sha256sum_prints_it(stubs, tmp_path):
    """sha256sum's own line ("sha256 <hex>  <path>") for a file, "file <path> absent" for none;
    the parser keys both by path."""
    from components.providers.systemd import _PROBE, parse_unit_probe

    unit = tmp_path / "slurmd.service"
    unit.write_text("[Service]\nExecStart=/usr/sbin/slurmd\n")
    gone = tmp_path / "slurmd.service.d" / "gpu-fleet.conf"
    (tmp_path / "show").write_text(SHOW_MOUNT.format(state="active").replace("Where=/mnt/data\n", ""))
    stubs.add("systemctl", f"cat {tmp_path / 'show'}")
    p = stubs.run(["sh", "-c", _PROBE.replace("$PROPS", ""), "sh", "slurmd.service", str(unit), str(gone)])
    obs = parse_unit_probe(p.stdout)
    assert obs["files"] == {str(unit): hashlib.sha256(unit.read_bytes()).hexdigest(), str(gone): None}
    assert obs["show"]["ActiveState"] == "active" and obs["reach"] is None


# ---- providers/scripts/unit_journal.sh: a failed unit's journal, once journald has read it ----

def journal_after_streams(stubs: Stubs, streams: Path, unit: str, wait_tenths: int):
    """Run unit_journal.sh as the provider does, with `journalctl` stubbed to say when it ran
    and whether the unit's stream state file was still there then."""
    from components.providers.systemd import journal_argv

    argv = journal_argv(unit)
    stubs.add("journalctl", f'ls {streams} | tr "\\n" " " > {streams.parent / "seen"}')
    start = time.monotonic()
    p = stubs.run([*argv[:-2], str(streams), str(wait_tenths)])  # the test's directory and limit
    return p, time.monotonic() - start, (streams.parent / "seen").read_text().split()


def test_the_journal_is_read_once_journald_has_closed_the_units_stream(stubs, tmp_path):
    """journald removes a stream's state file once it has read the stream to its end: the read
    waits for that, while another unit's open stream does not hold it."""
    streams = tmp_path / "streams"
    streams.mkdir()
    (streams / "8:1").write_text("PRIORITY=6\nLEVEL_PREFIX=1\nIDENTIFIER=sh\nUNIT=gf-broken.service\n")
    (streams / "8:2").write_text("PRIORITY=6\nIDENTIFIER=sleep\nUNIT=gf-broken.service.d\n")
    closer = subprocess.Popen(["sh", "-c", f"sleep 0.4; rm {streams / '8:1'}"])
    p, took, seen = journal_after_streams(stubs, streams, "gf-broken.service", 50)
    closer.wait()
    assert p.returncode == 0, p.stderr
    assert seen == ["8:2"] and 0.4 <= took < 3, (seen, took)
    assert stubs.calls("journalctl") == ["journalctl -u gf-broken.service -n 15 --no-pager -o short-iso"]


def test_a_stream_that_stays_open_delays_the_journal_only_as_long_as_the_limit(stubs, tmp_path):
    streams = tmp_path / "streams"
    streams.mkdir()
    (streams / "8:1").write_text("IDENTIFIER=slurmd\nUNIT=slurmd.service\n")
    p, took, seen = journal_after_streams(stubs, streams, "slurmd.service", 3)
    assert p.returncode == 0 and seen == ["8:1"] and 0.3 <= took < 2, (p.stderr, seen, took)


def test_no_stream_directory_reads_the_journal_at_once(stubs, tmp_path):
    p, took, _ = journal_after_streams(stubs, tmp_path / "streams", "slurmd.service", 50)
    assert p.returncode == 0 and took < 1 and len(stubs.calls("journalctl")) == 1


# ---- web/scripts/tailnet.sh: the baseline's check that the tailnet is up ----------------------

@pytest.mark.parametrize("held, ok", [(True, True), (False, False)])
def test_the_tailnet_baseline_reads_the_whole_address_listing(stubs, tmp_path, held, ok):
    """`ip` writes the interface's IPv4 line, then (later) its IPv6 one: the address is found
    however the listing arrives (a grep -q on a pipe under pipefail killed `ip` with SIGPIPE
    after the first line, and a held address read as not held)."""
    from components.layers.web.remote import TAILNET

    first = "5: tailscale0    inet 100.64.0.11/32 scope global tailscale0" if held else "5: tailscale0"
    stubs.add("ip", f'echo "{first}"; sleep 0.3; '
                    'echo "5: tailscale0    inet6 fe80::1/64 scope link"')
    stubs.add("podman", "echo null")
    stubs.add("ss", "echo '0 4096 127.0.0.1:8080 0.0.0.0:*'")
    p = stubs.run(["bash", "-c", TAILNET, "bash", "baseline", tmp_path / "tn-1", "tailscale0", "100.64.0.11",
                   "8080", "slurm-web-gateway"])
    assert (p.returncode == 0) == ok, p.stderr
    assert ("does not hold 100.64.0.11" in p.stderr) == (not ok), p.stderr
    assert (tmp_path / "tn-1" / "baseline.json").exists() == ok


# ---- web/scripts/token_start.sh ------------------------------------------------------------

@pytest.mark.parametrize(("state", "starts"), [("inactive", 1), ("failed", 1), ("activating", 2)])
def test_the_token_is_minted_by_the_unit_as_now_loaded(stubs, state, starts):
    """A renewal the timer started before the layer loaded the new unit (another lifetime) is
    waited out, then the unit started anew: `start` alone would only join the old run."""
    stubs.add("systemctl", f'[ "$1" = show ] && echo {state}; exit 0')
    p = stubs.run(bash(TOKEN_START, TOKEN_UNIT))
    assert p.returncode == 0, p.stderr
    assert stubs.calls("systemctl") == [f"systemctl show -p ActiveState --value {TOKEN_UNIT}"] + \
        [f"systemctl start {TOKEN_UNIT}"] * starts
