"""A dead host costs one connect timeout and one sentence per run (issue 17, part 2).

The unreachable hosts are local and real: a closed port on 127.0.0.1 (refused) and a port
that accepts TCP but never speaks SSH (the banner exchange times out, as a host whose sshd
hangs or whose packets are dropped after the handshake does). ssh itself is the real OpenSSH
client; no traffic leaves the machine.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from components.transport import (
    AuthFailed, FanOutError, HostKeyMismatch, HostRemembered, HostUnreachable, SshTarget, fan_out, reach, ssh,
)
from components.transport.ssh import Connection

SENTENCE = re.compile(r"^host (\S+): cannot reach (\S+) over SSH \(remembered from the first try at "
                      r"\d\d:\d\d:\d\d; not tried again this run\)$")


@pytest.fixture(autouse=True)
def fresh_run():
    reach.forget_unreachable()
    yield
    reach.forget_unreachable()


class SilentPort:
    """Accepts TCP connections and never sends an SSH banner; counts the connections.

    `close()` counts every connection the kernel took before it: the accepting thread stops
    only on finding the queue empty, however late a loaded machine lets it run (closing the
    socket under it could drop a queued connection from the count)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.accepted, self._held = 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except TimeoutError:
                if self._stop.is_set():
                    return
                continue
            self.accepted += 1
            self._held.append(c)

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()
        for c in self._held:
            c.close()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connect is refused
    return port


def target(tmp_path, name="node2", port=22, user="root") -> SshTarget:
    kh = tmp_path / "known_hosts"
    kh.touch()
    return SshTarget(name, "127.0.0.1", port, user, known_hosts_file=str(kh), use_ssh_config=False,
                     connect_timeout_s=1)


def resource(t: SshTarget):
    """What one host primitive does: connect, then a mutating command. Returns the error."""
    try:
        c = ssh.connection(t)
        c.connect(retries=2, backoff_s=0.2)
        c.run(["apt-get", "install", "-y", "slurmd"], mutating=True)
    except HostUnreachable as e:
        return e
    return None


def test_n_resources_on_a_host_that_times_out_cost_one_connect_timeout(tmp_path, capsys):
    silent = SilentPort()
    try:
        t = target(tmp_path, port=silent.port)
        start = time.monotonic()
        first = resource(t)
        one = time.monotonic() - start  # one connect: 2 tries of 1 s and a 0.2 s backoff
        assert type(first) is HostUnreachable and "cannot reach 127.0.0.1" in str(first)
        assert silent.accepted == 2

        n = 24  # resources of that host, four provider calls at once as in the engine
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=4) as ex:
            errors = list(ex.map(resource, [t] * n))
        rest = time.monotonic() - start
    finally:
        silent.close()
    assert all(type(e) is HostRemembered for e in errors)
    assert len({str(e) for e in errors}) == 1  # one sentence, the same for each resource
    assert SENTENCE.match(str(errors[0])).groups() == ("node2", f"127.0.0.1:{silent.port}")
    assert silent.accepted == 2  # never tried again
    assert 1.8 < one < 4 and rest < 0.5, (one, rest)
    with capsys.disabled():
        print(f"\n  dead host (banner timeout 1 s): first resource {one:.2f} s, "
              f"{n} more resources {rest * 1000:.0f} ms in all")


def test_concurrent_first_connects_share_one_timeout(tmp_path):
    """Four provider calls reach a dead host at once, some as another user: one set of tries."""
    silent = SilentPort()
    try:
        targets = [target(tmp_path, port=silent.port, user=u) for u in ("root", "fleet", "root", "admin")] * 3
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=4) as ex:
            errors = list(ex.map(resource, targets))
        took = time.monotonic() - start
    finally:
        silent.close()
    assert silent.accepted == 2
    assert [type(e) for e in errors].count(HostUnreachable) == 1
    assert [type(e) for e in errors].count(HostRemembered) == len(targets) - 1
    assert took < 4, took


def test_a_refused_port_is_remembered_and_commands_fail_at_once(tmp_path, monkeypatch):
    t = target(tmp_path, port=closed_port())
    first = resource(t)
    assert type(first) is HostUnreachable and "Connection refused" in str(first)
    spawned = []
    real_argv = ssh.ssh_argv
    monkeypatch.setattr(ssh, "ssh_argv", lambda tt: spawned.append(tt) or real_argv(tt))
    # a command without a connect first (fan_out's callers), through another Connection object
    with pytest.raises(HostRemembered) as e:
        Connection(t).run(["systemctl", "restart", "slurmd"], mutating=True)
    assert spawned == []  # no ssh process was started for it
    assert SENTENCE.match(str(e.value))


def test_reachability_is_per_address_port_and_jump_host(tmp_path):
    dead = target(tmp_path, port=closed_port())
    resource(dead)
    assert reach.remembered(dead) is not None
    assert reach.remembered(target(tmp_path, name="other-name", port=dead.port, user="fleet")) is not None
    assert reach.remembered(target(tmp_path, port=dead.port + 1 if dead.port < 65535 else 1)) is None
    via = SshTarget(**{**dead.as_dict(), "proxy_jump": "bastion"})
    assert reach.remembered(via) is None


def fake_ssh(monkeypatch, tmp_path, script: str):
    """ssh replaced by a shell script (its calls counted in a file); `-O check` says no master."""
    calls = tmp_path / "calls"
    calls.touch()
    body = f'[ "$1" = check ] && exit 255\necho x >> {calls}\n{script}'
    monkeypatch.setattr(ssh, "ssh_argv", lambda t: ["/bin/sh", "-c", body, "fake-ssh"])
    return lambda: len(calls.read_text().splitlines())


@pytest.mark.parametrize("says, cls", [
    ("Host key verification failed.", HostKeyMismatch),
    ("root@10.0.0.5: Permission denied (publickey).", AuthFailed),
])
def test_key_mismatch_and_refused_keys_are_not_remembered(monkeypatch, tmp_path, says, cls):
    calls = fake_ssh(monkeypatch, tmp_path, f"echo '{says}' >&2; exit 255")
    t = SshTarget("node1", "10.0.0.5")
    for attempt in (1, 2):
        with pytest.raises(cls):
            Connection(t).connect(retries=3, backoff_s=0)
        assert calls() == attempt  # not retried, and tried again on the next connect
    assert reach.remembered(t) is None


def test_a_connection_lost_mid_run_is_retried_then_remembered(monkeypatch, tmp_path):
    """A host that goes away after connecting: the command that finds it gone fails (never
    retried); the next resource's connect tries again, and only then is the host remembered."""
    up = tmp_path / "up"
    up.touch()
    calls = fake_ssh(monkeypatch, tmp_path, f'[ -e {up} ] && exit 0\n'
                                             'echo "ssh: connect to host 10.0.0.5 port 22: Connection refused" >&2; '
                                             'exit 255')
    c = Connection(SshTarget("node1", "10.0.0.5"))
    c.connect(retries=3, backoff_s=0)
    up.unlink()
    with pytest.raises(HostUnreachable) as e:
        c.run(["systemctl", "start", "slurmd"], mutating=True)
    assert type(e.value) is HostUnreachable
    assert reach.remembered(c.t) is None
    before = calls()
    with pytest.raises(HostUnreachable) as e:
        c.connect(retries=3, backoff_s=0)
    assert type(e.value) is HostUnreachable and calls() - before == 3
    with pytest.raises(HostRemembered):
        c.connect(retries=3, backoff_s=0)
    assert calls() - before == 3


def test_fan_out_names_the_dead_host_once_and_finishes_the_others(monkeypatch, tmp_path):
    fake_ssh(monkeypatch, tmp_path, 'case "$*" in *10.0.0.9*) '
                                    'echo "ssh: connect to host 10.0.0.9 port 22: Connection timed out" >&2; '
                                    'exit 255;; esac; exit 0')
    hosts = [SshTarget(f"node{i}", f"10.0.0.{i}") for i in (1, 2, 9)]
    monkeypatch.setattr(ssh, "ssh_argv", _with_address(ssh.ssh_argv))

    def step(c):
        c.connect(retries=2, backoff_s=0)
        return c.run(["true"], mutating=True).rc

    for _ in range(2):
        with pytest.raises(FanOutError) as e:
            fan_out(hosts, step)
        assert sorted(e.value.done) == ["node1", "node2"] and list(e.value.failures) == ["node9"]
    assert SENTENCE.match(str(e.value.failures["node9"]))


def _with_address(argv_of):
    """The fake ssh sees the target's address as its last argument before the command."""
    return lambda t: [*argv_of(t), t.address]
