"""Transport pieces that need no host: quoting, masking, ssh options, error classes."""

from __future__ import annotations

import shlex

import pytest

from components.transport import MASK, Secret, SshTarget, display, mask, shell_join
from components.transport.ssh import (
    AuthFailed, HostKeyMismatch, HostUnreachable, SudoPasswordRequired, _classify, ssh_argv,
)


def test_each_piece_is_quoted_and_round_trips():
    argv = ["printf", "%s\n", "a b", "$(reboot)", "it's", "; rm -rf /"]
    assert shlex.split(shell_join(argv)) == argv


def test_secret_pieces_are_masked_in_display_but_sent():
    argv = ["mysql", "-p", Secret("hunter2-xyz")]
    assert "hunter2-xyz" in shell_join(argv)
    assert "hunter2-xyz" not in display(argv) and MASK in display(argv)
    assert "hunter2-xyz" not in repr(argv) and "hunter2-xyz" not in str(argv[2])


def test_mask_removes_secret_lines_from_output():
    key = "-----BEGIN KEY-----\nAAAABBBBCCCCDDDD\n-----END KEY-----"
    out = mask("error near line AAAABBBBCCCCDDDD: bad", [key])
    assert "AAAABBBBCCCCDDDD" not in out


def test_ssh_checks_host_keys_and_multiplexes():
    t = SshTarget("n1", "10.0.0.5", 2222, "fleet", "/k", "/kh", "bastion", False, 7)
    argv = ssh_argv(t)
    joined = " ".join(argv)
    assert "StrictHostKeyChecking=yes" in joined and "StrictHostKeyChecking=no" not in joined
    assert "UserKnownHostsFile=/kh" in joined and "ControlMaster=auto" in joined
    assert "BatchMode=yes" in joined and "ConnectTimeout=7" in joined
    assert "ProxyJump=bastion" in joined and "IdentityFile=/k" in joined
    assert argv[1:3] == ["-F", "/dev/null"]
    assert argv[-5:] == ["-p", "2222", "-l", "fleet", "10.0.0.5"]


def test_user_ssh_config_is_honoured_by_default():
    assert "-F" not in ssh_argv(SshTarget("n1", "gpu01"))


@pytest.mark.parametrize("rc,out,cls", [
    (255, "Host key verification failed.", HostKeyMismatch),
    (255, "root@10.0.0.5: Permission denied (publickey).", AuthFailed),
    (255, "ssh: connect to host 10.0.0.5 port 22: Connection refused", HostUnreachable),
    (1, "sudo: a password is required", SudoPasswordRequired),
])
def test_errors_are_classified_and_name_the_host(rc, out, cls):
    e = _classify(SshTarget("gpu07", "10.0.0.5"), "systemctl start slurmd", rc, out)
    assert type(e) is cls
    assert str(e).startswith("host gpu07: `systemctl start slurmd` failed")
