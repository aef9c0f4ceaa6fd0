"""The lab's storage: the NFS client test double (tests/doubles/nfsfuse) and what `lab up`
leaves on the storage host and the nodes (lab/storage.py), before any storage layer runs."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import py_compile
import time

import pytest

from lab import nspawn, storage
from lab.hosts import lab_hosts

from .conftest import lab_command, load_lab

NFSFUSE = storage.NFSFUSE


def load_nfsfuse():
    """The double as a module: only the standard library is needed to import it."""
    loader = importlib.machinery.SourceFileLoader("nfsfuse_double", str(NFSFUSE))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


# --- pure: no root, no lab ---------------------------------------------------------------

def test_nfsfuse_compiles_and_is_an_executable_python3_script(tmp_path):
    py_compile.compile(str(NFSFUSE), cfile=str(tmp_path / "nfsfuse.pyc"), doraise=True)
    assert NFSFUSE.read_text().startswith("#!/usr/bin/python3\n")
    assert NFSFUSE.stat().st_mode & 0o111 == 0o111
    assert "TEST DOUBLE" in (NFSFUSE.parent / "README.md").read_text()


def test_nfsfuse_takes_what_mount_fuse_passes():
    m = load_nfsfuse()
    # /sbin/mount.fuse runs `nfsfuse SOURCE DIR -o OPTS` (as systemd's Type=fuse.nfsfuse does)
    server, export, mp, fg, opts = m.parse_args(
        ["10.213.57.10:/models", "/mnt/models", "-o", "ro,allow_other,_netdev,nofail,x-systemd.requires=a"])
    assert (server, export, mp, fg) == ("10.213.57.10", "/models", "/mnt/models", False)
    assert opts == {"fsname": "10.213.57.10:/models", "subtype": "nfsfuse", "big_writes": True,
                    "max_write": "131072", "max_read": "131072", "ro": True, "allow_other": True}
    _s, _e, _m, fg, opts = m.parse_args(["storage:/data", "/mnt/data", "-orw,vers=3,debug,uid=5"])
    assert fg and opts["rw"] is True and opts["uid"] == "5" and "vers" not in opts


@pytest.mark.parametrize("argv, why", [
    (["10.213.57.10:/models"], "SERVER:/EXPORT MOUNTPOINT"),
    (["10.213.57.10", "/mnt"], "not SERVER:/EXPORT"),
    ([":/models", "/mnt"], "not SERVER:/EXPORT"),
    (["h:models", "/mnt"], "not SERVER:/EXPORT"),
    (["h:/models", "/mnt", "-o", "vers=4"], "only NFSv3"),
    (["h:/models", "/mnt", "-o", "nfsvers=4.1"], "only NFSv3"),
    (["h:/models", "/mnt", "-f"], "unknown argument"),
])
def test_nfsfuse_refuses_what_it_cannot_do(argv, why):
    m = load_nfsfuse()
    with pytest.raises(m.Usage, match=why):
        m.parse_args(argv)


def test_nfsfuse_utimens_resolves_now_and_omit():
    m = load_nfsfuse()
    old = lambda: (111, 222)  # noqa: E731
    assert m.timevals(None, old) is None  # touch: both to the server's clock
    assert m.timevals((m.UTIME_NOW, m.UTIME_NOW), old) is None
    assert m.timevals((5 * 10**9, 7 * 10**9 + 3), old) == (5 * 10**9, 7 * 10**9 + 3)
    assert m.timevals((m.UTIME_OMIT, 9), old) == (111, 9)
    before = time.time_ns()
    a, mt = m.timevals((m.UTIME_NOW, m.UTIME_OMIT), old)
    assert a >= before and mt == 222


def test_nspawn_flags_by_role():
    flags = {h.name: nspawn.nspawn_argv(h, storage.ROOT / "repo") for h in lab_hosts(2)}
    for name, argv in flags.items():
        assert argv[0] == "systemd-nspawn" and "--keep-unit" in argv and "--register=no" in argv
        assert (name == "storage") == ("--system-call-filter=open_by_handle_at" in argv), name
        assert ("--bind=/dev/fuse" in argv) == (name != "ctl"), name
    assert len(set(flags["storage"])) == len(flags["storage"])


def test_the_admin_part_and_its_packages():
    pkgs = set(storage.ROOT.joinpath("lab", "packages.txt").read_text().split())
    assert {"zfs-fuse", "nfs-ganesha", "nfs-ganesha-vfs", "fuse", "python3-fusepy", "libnfs13",
            "libnfs-utils"} <= pkgs
    assert storage.MOUNT_HELPER_PATH in storage.ZFS_FUSE_DROPIN
    assert "ExecStart=/sbin/zfs-fuse --no-daemon" in storage.ZFS_FUSE_DROPIN
    script = storage.HOST_SCRIPT.read_text()
    # the drop-in goes in before the package (its postinst starts the service)
    assert script.index('put "$dropin_path"') < script.index("apt-get install")


# --- on the lab ---------------------------------------------------------------------------

def test_storage_host_has_zfs_fuse_and_the_pool(lab):
    out = lab.ssh("storage", "systemctl is-active zfs-fuse; zpool list -H -o name,health,size ai; "
                             "zfs list -H -o name -r ai; ls -ls /var/lib/zfs-vdev").stdout
    lines = out.splitlines()
    assert lines[0] == "active"
    name, health, _size = lines[1].split()
    assert (name, health) == ("ai", "ONLINE")
    assert lines[2] == "ai", "lab up creates no dataset (the storage layer does)"
    status = lab.ssh("storage", "zpool status ai").stdout
    assert "mirror" in status and status.count("ONLINE") >= 4, status
    assert lab.ssh("storage", "dpkg -s nfs-ganesha", check=False).returncode != 0, \
        "lab up installs no NFS server (the storage layer does)"


def test_every_node_has_fuse_and_the_nfs_client_double(lab):
    want = storage.NFSFUSE.read_bytes()
    for name in lab.names("node"):
        out = lab.ssh(name, f"test -c /dev/fuse && echo fuse; sha256sum {storage.NFSFUSE_PATH}; "
                            "stat -c %a " + storage.NFSFUSE_PATH).stdout.splitlines()
        assert out[0] == "fuse", name
        assert out[1].split()[0] == hashlib.sha256(want).hexdigest(), name
        assert out[2] == "755", name
    assert lab.ssh("ctl", "test -e /dev/fuse", check=False).returncode != 0


def test_pool_export_and_import_helpers(lab):
    h = storage.storage_host()
    try:
        storage.export_pool(h=h)
        assert storage.pool_health(h) is None
        assert "no such pool" in storage.pool_status(h)
    finally:
        storage.import_pool(h=h)
    assert storage.pool_health(h) == "ONLINE"


def test_the_pool_comes_back_after_a_reboot_of_the_storage_host(lab):
    lab.ssh("storage", "echo kept > /root/reboot-marker; zfs create -o mountpoint=/srv/reboot-probe ai/reboot-probe")
    others = {h["name"]: h["pid"] for h in load_lab().inventory["hosts"] if h["name"] != "storage"}
    try:
        p = lab_command("reboot", "storage")
        assert "rebooted storage" in p.stdout
        after = load_lab()
        assert {h["name"]: h["pid"] for h in after.inventory["hosts"] if h["name"] != "storage"} == others
        out = after.ssh("storage", "cat /root/reboot-marker; systemctl is-active zfs-fuse; "
                                   "zpool list -H -o name,health ai; "
                                   "zfs get -H -o value mounted ai/reboot-probe").stdout.splitlines()
        # its datasets mounted again, as a boot mounts them (the storage layer refuses without)
        assert out == ["kept", "active", "ai\tONLINE", "yes"]
    finally:
        lab.ssh("storage", "rm -f /root/reboot-marker; zfs destroy ai/reboot-probe", check=False)
