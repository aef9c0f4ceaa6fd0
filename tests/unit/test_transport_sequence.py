"""A resource's steps and the read after them in one round trip (components/transport/sequence.py).

The host is this machine: the real `Connection` with a local shell where OpenSSH would open
the remote one (tests/unit/fakeconn.py), so sequence.sh, the framing, the stdin routing and
the error classes run for real; only SSH is left out."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import pytest

from components.transport import MASK, HostError, HostUnreachable, Secret, SshTarget, ssh
from components.transport import sequence
from components.kit import sh
from components.transport.command import Piece
from components.transport.sequence import chunks, run_sequence, split_frames

from . import fakeconn


@dataclass(frozen=True)
class S:
    argv: Sequence[Piece]
    stdin: Optional[bytes] = None
    stdin_secret: bool = False


@pytest.fixture
def hosts(monkeypatch):
    return fakeconn.install(monkeypatch)


@pytest.fixture
def conn(hosts):
    c = hosts.connection(SshTarget("node1", "10.0.0.1"))
    c.connect()
    return c


def test_steps_and_the_read_after_them_go_in_one_round_trip(hosts, conn, tmp_path):
    log = tmp_path / "order"
    steps = [S(sh('echo one >>"$1"; echo out1; echo err1 >&2', str(log))),
             S(sh('echo two >>"$1"; printf "== gf-seq 9 9 9 9\\n"', str(log))),  # a frame-like line
             S(sh('echo three >>"$1"', str(log)))]
    read = run_sequence(conn, steps, then=["cat", str(log)])
    assert hosts.round_trips() == 1
    assert [(s.mutating, s.trip) for s in hosts.sent] == [(True, 1)] * 3 + [(False, 1)]
    assert read.rc == 0 and read.stdout == "one\ntwo\nthree\n" and read.stderr == ""


def test_the_first_failing_step_stops_the_rest_with_its_own_error(hosts, conn, tmp_path):
    after = tmp_path / "after"
    steps = [S(["sh", "-c", "echo fine"]),
             S(["sh", "-c", "echo 'bad thing' >&2; exit 7"]),
             S(["touch", str(after)])]
    with pytest.raises(HostError) as e:
        run_sequence(conn, steps, then=["true"])
    err = e.value
    assert err.rc == 7 and err.command == conn.shown(steps[1].argv)
    assert "bad thing" in err.output and "fine" not in err.output
    assert not after.exists() and hosts.round_trips() == 1


def test_a_failing_read_raises_as_the_probe_would(conn):
    with pytest.raises(HostError) as e:
        run_sequence(conn, [S(["true"])], then=["sh", "-c", "echo gone >&2; exit 3"])
    assert e.value.rc == 3 and "gone" in e.value.output


def test_each_step_gets_exactly_its_own_stdin(conn, tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    blob = bytes(range(256)) * 300 + b"no newline at the end"
    steps = [S(["sh", "-c", 'cat > "$1"', "sh", str(a)], stdin=blob),
             S(["sh", "-c", 'cat > "$1"', "sh", str(b)]),  # none: reads nothing
             S(["sh", "-c", 'cat > "$1"', "sh", str(c)], stdin=b"third\n")]
    run_sequence(conn, steps)
    assert a.read_bytes() == blob and b.read_bytes() == b"" and c.read_bytes() == b"third\n"


def test_a_secret_stdin_is_masked_in_the_error_and_the_command_log(conn, tmp_path, monkeypatch):
    log = tmp_path / "commands.jsonl"
    monkeypatch.setenv(ssh.COMMAND_LOG_ENV, str(log))
    secret = "munge-key-7f3a9c1d2e4b"
    steps = [S(["sh", "-c", "cat >/dev/null"], stdin=b"public text\n"),
             S(["sh", "-c", 'echo "leaked: $(cat)"; exit 4'], stdin=secret.encode(), stdin_secret=True)]
    with pytest.raises(HostError) as e:
        run_sequence(conn, steps)
    assert secret not in str(e.value) and f"leaked: {MASK}" in e.value.output
    assert secret not in log.read_text()
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["mutating"] is True and entry["rc"] == 0


def test_what_cannot_share_a_round_trip_goes_alone():
    plain = [S(["true"]), S(["true"])]
    secret = S(["sh", "-c", 'echo "$1"', "sh", Secret("s3cret-value")])
    huge = S(["cat"], stdin=b"x" * (sequence.MAX_STDIN + 1))
    assert [len(c) for c in chunks(plain)] == [2]
    assert [len(c) for c in chunks([*plain, secret, *plain])] == [2, 1, 2]
    assert [len(c) for c in chunks([huge, *plain])] == [1, 2]


def test_an_ssh_failure_before_the_script_is_the_first_steps(conn, monkeypatch):
    monkeypatch.setattr(ssh, "ssh_argv", lambda t: [
        "/bin/sh", "-c", 'echo "ssh: connect to host 10.0.0.1 port 22: Connection refused" >&2; exit 255', "x"])
    with pytest.raises(HostUnreachable) as e:
        run_sequence(conn, [S(["touch", "/nonexistent/a"]), S(["true"])], then=["true"])
    assert e.value.command == conn.shown(["touch", "/nonexistent/a"])


def test_a_cut_off_sequence_is_an_error_not_a_success():
    with pytest.raises(ValueError, match="short"):
        split_frames(b"== gf-seq 1 0 10 0\nabc")
    with pytest.raises(ValueError, match="frame 2 where 1"):
        split_frames(b"== gf-seq 2 0 0 0\n")
    assert split_frames(b"== gf-seq 1 0 3 1\nabcd== gf-seq 2 5 0 0\n") == [(0, b"abc", b"d"), (5, b"", b"")]


def test_no_step_starts_once_the_client_is_gone(tmp_path):
    """The run was stopped (lifeline.py ends the ssh client): the step in flight ends as it
    would, the next one never starts."""
    first, second = tmp_path / "first", tmp_path / "second"
    p = subprocess.Popen(["sh", "-c", sequence._SCRIPT, "gf-seq",
                          "-", f"sleep 0.5; touch {first}", "-", f"touch {second}"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    time.sleep(0.1)
    p.stdout.close()  # the client is gone
    assert p.wait(timeout=10) != 0
    time.sleep(0.2)
    assert first.exists() and not second.exists()


def test_a_plain_step_alone_is_sent_as_it_is(hosts, conn, tmp_path):
    run_sequence(conn, [S(["touch", str(tmp_path / "x")])])
    assert [s.cmd for s in hosts.sent] == [conn.shown(["touch", str(tmp_path / "x")])]
    assert (tmp_path / "x").exists()


def test_no_steps_is_just_the_read(hosts, conn):
    assert run_sequence(conn, [], then=["echo", "hi"]).stdout == "hi\n"
    assert [s.mutating for s in hosts.sent] == [False]


def test_a_connection_lost_mid_sequence_is_the_step_in_flights_unreachable(conn, monkeypatch, tmp_path):
    """sshd stops while the second step runs: every process of the session gets SIGHUP and
    ssh exits 255. The error is the one that step alone would have raised (host unreachable,
    naming it), not a cut-off sequence; the third step never starts."""
    gone, after = tmp_path / "gone", tmp_path / "after"
    # ssh: the remote session in its own process group, with SIGHUP's default action as sshd's
    # sessions have (a test run under nohup inherits it ignored); 255 once the "sshd" went
    monkeypatch.setattr(ssh, "ssh_argv", lambda t: [
        "/bin/sh", "-c", 'l=$1; m=$2; shift 2; for cmd; do :; done; '
        'env --default-signal=HUP setsid -w /bin/sh -c "$l" fake "$cmd"; '
        'rc=$?; [ -e "$m" ] || exit "$rc"; echo "Connection to 10.0.0.1 closed by remote host." >&2; exit 255',
        "fake-ssh", fakeconn.LOCAL_SHELL, str(gone)])
    steps = [S(["true"]), S(sh('touch "$1"; kill -HUP 0; sleep 5', str(gone))), S(["touch", str(after)])]
    with pytest.raises(HostUnreachable, match="cannot reach 10.0.0.1:22 over SSH") as e:
        run_sequence(conn, steps, then=["true"])
    assert e.value.command == conn.shown(steps[1].argv)
    assert "closed by remote host" in str(e.value)
    assert gone.exists() and not after.exists()
