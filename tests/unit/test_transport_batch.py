"""Probes that arrive together share one round trip (components/transport/batch.py).

The host is this machine: a connection whose `run` executes the command line with the local
`sh` (what the remote login shell does with it), so batch.sh and the framing run for real;
only SSH is left out."""

from __future__ import annotations

import json
import subprocess
import time
import threading

import pytest

from components.transport import batch
from components.transport.batch import Batcher, split_frames
from components.transport.command import Secret, shell_join
from components.transport.ssh import Result


class LocalConn:
    def __init__(self):
        self.sent: list[list] = []
        self.t = type("T", (), {"name": "here"})()

    def run(self, argv, *, mutating, sudo, check, timeout, _errors="replace", _for=None):
        assert mutating is False and sudo is False and check is False
        self.sent.append(list(argv))
        p = subprocess.run(["sh", "-c", shell_join(argv)], capture_output=True, timeout=timeout)
        return Result(p.returncode, p.stdout.decode(errors=_errors), p.stderr.decode(errors=_errors))


PROBES = [
    ["sh", "-c", "printf 'one\\n'; echo warn >&2"],
    ["sh", "-c", "printf 'caf\\303\\251 \\377 no newline'; exit 3"],  # UTF-8, a stray byte, rc 3
    ["sh", "-c", "true"],  # nothing at all
    ["sh", "-c", "printf '== gf-batch 9 9 9 9\\n'; cat /dev/null"],  # a frame-like line of its own
    ["sh", "-c", 'read x || echo "stdin is empty"'],  # stdin is /dev/null, as for a lone probe
]


def alone(argv) -> Result:
    return LocalConn().run(argv, mutating=False, sudo=False, check=False, timeout=30)


def together(conn, probes) -> list[Result]:
    b = Batcher(conn)
    out: list = [None] * len(probes)
    start = threading.Barrier(len(probes))

    def go(i):
        start.wait()
        out[i] = b.run(list(probes[i]), 30)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(probes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_concurrent_probes_share_one_command_and_each_gets_its_own_result(monkeypatch):
    monkeypatch.setattr(batch, "WINDOW_S", 0.2)
    conn = LocalConn()
    got = together(conn, PROBES)
    assert len(conn.sent) == 1 and conn.sent[0][3] == "gf-batch"  # one round trip for all five
    assert got == [alone(p) for p in PROBES]
    assert got[1].rc == 3 and got[1].stdout == "café \ufffd no newline"
    assert got[0].stderr == "warn\n" and got[4].stdout == "stdin is empty\n"


def test_a_lone_probe_is_sent_as_it_is(monkeypatch):
    monkeypatch.setattr(batch, "WINDOW_S", 0.0)
    conn = LocalConn()
    assert together(conn, PROBES[:1]) == [alone(PROBES[0])]
    assert conn.sent == [PROBES[0]]


def test_batches_stay_under_the_command_line_cap(monkeypatch):
    monkeypatch.setattr(batch, "WINDOW_S", 0.2)
    monkeypatch.setattr(batch, "MAX_BYTES", 200)
    big = [["sh", "-c", f"echo {i}; : {'x' * 120}"] for i in range(4)]
    conn = LocalConn()
    got = together(conn, big)
    assert len(conn.sent) == 4  # each member alone over the cap with any other
    assert sorted(r.stdout for r in got) == ["0\n", "1\n", "2\n", "3\n"]


def test_a_batch_cut_off_fails_every_member_naming_the_host(monkeypatch):
    monkeypatch.setattr(batch, "WINDOW_S", 0.2)

    class Cut(LocalConn):
        def run(self, argv, **kw):
            r = super().run(argv, **kw)
            return Result(r.rc, r.stdout[: len(r.stdout) // 2], r.stderr)

    b = Batcher(Cut())
    errors: list = []

    def go(p):
        try:
            b.run(list(p), 30)
        except Exception as e:
            errors.append(str(e))

    threads = [threading.Thread(target=go, args=(p,)) for p in PROBES[:3]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 3 and all("host here" in e and "cut off" in e for e in errors), errors


def test_frames_are_read_by_byte_count():
    out = b"== gf-batch 1 0 3 0\nab\n== gf-batch 2 1 0 2\nE\n"
    assert split_frames(out, 2) == [(0, b"ab\n", b""), (1, b"", b"E\n")]
    with pytest.raises(ValueError, match="short"):
        split_frames(out[:-1], 2)
    with pytest.raises(ValueError, match="missing"):
        split_frames(out, 3)


def test_secrets_and_stdin_never_join_a_batch():
    assert batch.batchable(["cat", "/etc/x"])
    assert not batch.batchable(["mysql", Secret("pw")])


# ---- a refresh reads each host once (components/transport/refresh.py) -----------------------
def reading(tmp_path, monkeypatch, remembered=()):
    from components.transport import refresh
    from components.transport.ssh import SshTarget

    monkeypatch.setenv(refresh.PROBE_DIR_ENV, str(tmp_path))
    r = refresh.HostReading(SshTarget("node1", "192.0.2.1"))
    if remembered:
        r._path.parent.mkdir(parents=True, exist_ok=True)
        r._path.write_text(json.dumps({"probes": [{"line": x, "for": f"File {x}"} for x in remembered]}))
    calls: list = []

    def read_all(lines, labels):
        calls.append((list(lines), list(labels)))
        return [Result(0, f"out of {x}", "") for x in lines]

    return r, calls, read_all


def test_the_first_refresh_read_takes_the_hosts_reading_and_the_rest_are_answered_from_it(tmp_path, monkeypatch):
    r, calls, read_all = reading(tmp_path, monkeypatch, remembered=["a", "b", "c"])
    assert r.answer("b", "File b", read_all).stdout == "out of b"
    assert calls == [(["a", "b", "c"], ["File a", "File b", "File c"])]  # one round trip for all
    assert r.answer("a", "File a", read_all).stdout == "out of a"
    assert r.answer("c", "File c", read_all).stdout == "out of c"
    assert r.answer("new", "File new", read_all) is None  # not in the reading: probed as usual
    assert len(calls) == 1
    # a line the reading already answered (a second resource with the same probe command, a
    # second refresh) is probed as usual, alone: not a second whole reading
    assert r.answer("a", "File a", read_all) is None
    assert len(calls) == 1
    # the lines this run asked are remembered for the next run
    assert [p["line"] for p in json.loads(r._path.read_text())["probes"]] == ["b", "a", "c", "new"]


def test_a_mutating_command_or_age_drops_what_the_reading_holds(tmp_path, monkeypatch):
    from components.transport import refresh

    r, calls, read_all = reading(tmp_path, monkeypatch, remembered=["a", "b"])
    r.answer("a", None, read_all)
    r.forget()  # a change went to the host
    r.answer("b", None, read_all)
    assert len(calls) == 2  # b was read again, after the change
    r.forget()
    r.answer("a", None, read_all)
    monkeypatch.setattr(refresh, "MAX_AGE_S", 0.0)
    time.sleep(0.01)
    assert r.answer("b", None, read_all) is None  # too old to answer: probed as usual
    assert len(calls) == 3


def test_nothing_remembered_means_no_reading(tmp_path, monkeypatch):
    r, calls, read_all = reading(tmp_path, monkeypatch)
    assert r.answer("a", None, read_all) is None and calls == []
    r._path.write_text("{not json")
    assert r.remembered() == {}
