"""The SSH transport against real lab hosts: reuse, fan-out, sudo, and every bad input."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from components.transport import (
    AuthFailed, FanOutError, HostKeyMismatch, HostUnreachable, Secret, SshTarget,
    SudoPasswordRequired, connection, fan_out,
)
from components.transport.ssh import Connection

from .labhosts import lab_conn


def target(name: str, **override) -> SshTarget:
    return SshTarget.from_dict(lab_conn(name, **override))


def test_commands_reuse_one_connection(lab):
    c = Connection(target("node1"))
    c.connect()
    start = time.monotonic()
    for _ in range(10):
        assert c.run(["hostname"], mutating=False).stdout.strip() == "node1"
    per_cmd = (time.monotonic() - start) / 10
    # A fresh SSH handshake costs well over 100 ms here; a multiplexed command a few ms.
    assert per_cmd < 0.1, f"{per_cmd:.3f} s per command: the control connection is not reused"


def test_fan_out_reaches_every_host_in_parallel(lab):
    names = ["storage", "ctl", "node1", "node2", "node3"]
    got = fan_out([target(n) for n in names], lambda c: c.run(["hostname"], mutating=False).stdout.strip())
    assert got == {n: n for n in names}


def test_arguments_are_quoted_not_interpreted(lab):
    c = connection(target("node1"))
    out = c.run(["printf", "%s|", "a b", "$(hostname)", "; echo pwned"], mutating=False).stdout
    assert out == "a b|$(hostname)|; echo pwned|"


def test_secret_is_masked_in_errors(lab):
    c = connection(target("node1"))
    with pytest.raises(Exception) as e:
        c.run(["sh", "-c", 'echo "got $1"; exit 3', "sh", Secret("s3cret-value-123")], mutating=False)
    assert "s3cret-value-123" not in str(e.value)
    assert "host node1" in str(e.value) and "exit code 3" in str(e.value)


def test_non_root_user_goes_through_sudo(lab):
    c = Connection(target("node1", user="fleetadmin"))
    assert c.run(["id", "-u"], mutating=False).stdout.strip() == "0"
    assert c.run(["id", "-un"], mutating=False, sudo=False).stdout.strip() == "fleetadmin"


def test_sudo_password_prompt_is_a_clear_error_not_a_hang(lab):
    c = Connection(target("node1", user="fleetnopw"))
    start = time.monotonic()
    with pytest.raises(SudoPasswordRequired) as e:
        c.run(["id", "-u"], mutating=False, timeout=30)
    assert time.monotonic() - start < 20
    assert "host node1" in str(e.value) and "NOPASSWD" in str(e.value)


def test_unreachable_address_names_the_host(lab):
    c = Connection(SshTarget("ghost", "127.0.0.1", port=9, connect_timeout_s=3))
    with pytest.raises(HostUnreachable) as e:
        c.connect(retries=2, backoff_s=0.1)
    assert str(e.value).startswith("host ghost:") and "cannot reach 127.0.0.1:9" in str(e.value)


def test_wrong_host_key_is_refused(lab, tmp_path):
    # known_hosts that maps node1's address to node2's key
    real = Path(lab_conn("node1")["known_hosts_file"]).read_text().splitlines()
    addr1, addr2 = lab_conn("node1")["address"], lab_conn("node2")["address"]
    node2_keys = [line.split(None, 1)[1] for line in real if line.split(None, 1)[0].split(",")[0] in (addr2, "node2")]
    assert node2_keys
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(f"{addr1} {k}\n" for k in node2_keys))
    c = Connection(target("node1", known_hosts_file=str(kh)))
    with pytest.raises(HostKeyMismatch) as e:
        c.connect()
    assert str(e.value).startswith("host node1:") and "refusing to connect" in str(e.value)


def test_missing_key_file_is_caught_before_connecting(lab, tmp_path):
    c = Connection(target("node1", identity_file=str(tmp_path / "nope")))
    with pytest.raises(AuthFailed) as e:
        c.connect()
    assert "host node1" in str(e.value) and "identity_file" in str(e.value) and "does not exist" in str(e.value)


def test_fan_out_says_which_hosts_failed_and_which_completed(lab):
    targets = [target("node1"), SshTarget("ghost", "127.0.0.1", port=9, connect_timeout_s=3), target("node2")]

    def probe(c):
        c.connect(retries=1)
        return c.run(["true"], mutating=False).rc

    with pytest.raises(FanOutError) as e:
        fan_out(targets, probe)
    assert set(e.value.failures) == {"ghost"} and sorted(e.value.done) == ["node1", "node2"]
    assert "completed on: node1, node2" in str(e.value)
