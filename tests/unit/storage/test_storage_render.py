"""Golden files for the storage layer's renderers; regenerate with GPU_FLEET_UPDATE_GOLDEN=1."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from components.config.load import parse_fleet_config
from components.layers.slurm.render import HEADER
from components.layers.storage.render import (
    EXPORT_IDS, MOUNTED_CHECK, PSEUDO, mount_unit_name, render_exports, render_ganesha_conf,
    render_ganesha_dropin, render_mount_unit, render_nfs_server_dropin,
)
from tests.conftest import stack_config
from tests.unit.slurm.test_slurm_render import check_golden

SERVER = "192.0.2.10"


def storage(**section):
    """The canary stack's storage layer, on, with the compute network as its clients."""
    raw = stack_config("canary")
    raw["gpu-fleet:storage"] = {"enabled": True, "clients": "192.0.2.0/24", **section}
    return parse_fleet_config(raw, "canary").storage


KERNEL = storage()
LAB = storage(server="ganesha", client="fuse-libnfs")


def test_golden_kernel_server():
    check_golden("storage.exports", render_exports(KERNEL))
    check_golden("storage.nfs-server.dropin.conf", render_nfs_server_dropin(KERNEL))


def test_golden_ganesha_server():
    check_golden("storage.ganesha.conf", render_ganesha_conf(LAB))
    check_golden("storage.ganesha.dropin.conf", render_ganesha_dropin(LAB))


@pytest.mark.parametrize("client, st", [("kernel", KERNEL), ("fuse", LAB)])
@pytest.mark.parametrize("duty", ["models", "data"])
def test_golden_mount_units(client, st, duty):
    name, text = render_mount_unit(st, duty, SERVER)
    assert name == f"mnt-{duty}.mount"
    check_golden(f"storage.{client}.{name}", text)


def test_every_file_carries_the_header():
    texts = [render_exports(KERNEL), render_ganesha_conf(LAB), render_nfs_server_dropin(),
             render_nfs_server_dropin(KERNEL), render_ganesha_dropin(LAB),
             render_mount_unit(KERNEL, "models", SERVER)[1], render_mount_unit(LAB, "data", SERVER)[1]]
    assert all(t.startswith(HEADER) and t.endswith("\n") for t in texts)


def test_exports_contract():
    lines = [line for line in render_exports(KERNEL).splitlines() if line and not line.startswith("#")]
    assert lines == [
        "/srv/ai/models 192.0.2.0/24(ro,root_squash,sync,no_subtree_check,mp,sec=sys)",
        "/srv/ai/data 192.0.2.0/24(rw,root_squash,sync,no_subtree_check,mp,sec=sys)",
    ]


def test_exports_follow_the_stack():
    st = storage(clients="192.0.0.0/16",
                 models={"dataset": "ai/m", "mountpoint": "/tank/m", "client_mount": "/mnt/m"})
    text = render_exports(st)
    assert "/tank/m 192.0.0.0/16(ro," in text and "/srv/ai/data 192.0.0.0/16(rw," in text


def test_ganesha_exports_ids_pseudo_and_access():
    conf = render_ganesha_conf(LAB)
    blocks = conf.split("EXPORT {")[1:]
    assert len(blocks) == 2
    for duty, block, access in (("models", blocks[0], "RO"), ("data", blocks[1], "RW")):
        assert f"Export_Id = {EXPORT_IDS[duty]};" in block
        assert f"Path = /srv/ai/{duty};" in block and f"Pseudo = {PSEUDO[duty]};" in block
        assert f"Clients = 192.0.2.0/24;\n        Access_Type = {access};" in block
        for line in ("Access_Type = None;", "Squash = root_squash;", "Anonymous_Uid = 65534;",
                     "Anonymous_Gid = 65534;", "SecType = sys;", "Transports = TCP;", "Name = VFS;"):
            assert line in block, (duty, line)
    for line in ("Graceless = true;", "mount_path_pseudo = true;", "Enable_NLM = false;",
                 "Only_Numeric_Owners = true;", "Default_Log_Level = EVENT;"):
        assert line in conf


def test_no_clients_is_refused():
    raw = stack_config("canary")
    st = parse_fleet_config(raw, "canary").storage  # off: no client network
    with pytest.raises(ValueError, match="storage.clients"):
        render_exports(st)
    with pytest.raises(ValueError, match="storage.clients"):
        render_ganesha_conf(st)


def test_kernel_mount_units():
    name, text = render_mount_unit(KERNEL, "models", SERVER)
    assert name == "mnt-models.mount"
    for line in ("What=192.0.2.10:/srv/ai/models", "Where=/mnt/models", "Type=nfs",
                 "Options=ro,vers=4.2,hard,proto=tcp,nosuid,nodev,_netdev", "TimeoutSec=30",
                 "Wants=network-online.target", "After=network-online.target", "WantedBy=remote-fs.target"):
        assert line in text.splitlines(), line
    _, data = render_mount_unit(KERNEL, "data", SERVER)
    assert "Options=rw,vers=4.2,hard,proto=tcp,nosuid,nodev,_netdev" in data.splitlines()
    assert "What=[fd00::10]:/srv/ai/data" in render_mount_unit(KERNEL, "data", "fd00::10")[1]


def test_fuse_mount_units_are_a_named_test_double():
    _, text = render_mount_unit(LAB, "models", SERVER)
    assert "TEST DOUBLE" in text
    for line in ("What=192.0.2.10:/models", "Type=fuse.nfsfuse", "Options=ro,allow_other,nosuid,nodev,_netdev"):
        assert line in text.splitlines(), line
    _, data = render_mount_unit(LAB, "data", SERVER)
    assert "What=192.0.2.10:/data" in data and "Options=rw,allow_other,nosuid,nodev,_netdev" in data
    with pytest.raises(ValueError, match="duty"):
        render_mount_unit(LAB, "scratch", SERVER)


def test_unit_name_follows_the_client_mount():
    st = storage(data={"dataset": "ai/data", "mountpoint": "/srv/ai/data", "client_mount": "/mnt/job-data"})
    name, text = render_mount_unit(st, "data", SERVER)
    assert name == "mnt-job\\x2ddata.mount" and "Where=/mnt/job-data" in text


KNOWN_NAMES = {
    "/mnt/models": "mnt-models.mount",
    "/": "-.mount",
    "/mnt/my-data": "mnt-my\\x2ddata.mount",
    "/srv/ai/models/": "srv-ai-models.mount",
    "/mnt/.hidden": "mnt-.hidden.mount",
    "/.snap": "\\x2esnap.mount",
    "/mnt/a+b": "mnt-a\\x2bb.mount",
    "//mnt//x": "mnt-x.mount",
    "/var/lib/gpu_fleet:1": "var-lib-gpu_fleet:1.mount",
    "/mnt/a.b/-x": "mnt-a.b-\\x2dx.mount",
}


@pytest.mark.parametrize("path", sorted(KNOWN_NAMES))
def test_mount_unit_name(path):
    """Values printed by `systemd-escape --path --suffix=mount` (systemd 252)."""
    assert mount_unit_name(path) == KNOWN_NAMES[path]


@pytest.mark.skipif(shutil.which("systemd-escape") is None, reason="no systemd-escape here")
@pytest.mark.parametrize("path", sorted(KNOWN_NAMES))
def test_mount_unit_name_matches_systemd(path):
    out = subprocess.run(["systemd-escape", "--path", "--suffix=mount", path], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert mount_unit_name(path) == out


@pytest.mark.parametrize("path", ["mnt/models", "/mnt/../etc"])
def test_mount_unit_name_refuses_what_systemd_refuses(path):
    with pytest.raises(ValueError):
        mount_unit_name(path)


def test_servers_start_after_the_datasets_and_check_them():
    plain = render_nfs_server_dropin()
    assert "After=zfs-mount.service\nRequires=zfs-mount.service\n" in plain
    assert "ExecStartPre" not in plain
    checks = [f"ExecStartPre={MOUNTED_CHECK} ai/models /srv/ai/models",
              f"ExecStartPre={MOUNTED_CHECK} ai/data /srv/ai/data"]
    for text in (render_nfs_server_dropin(KERNEL), render_ganesha_dropin(LAB)):
        lines = text.splitlines()
        assert [line for line in lines if line.startswith("ExecStartPre=")] == checks
        assert lines.index("[Service]") < lines.index(checks[0])
        assert not any(line.startswith("ExecReload") for line in lines)  # Debian's stays
    assert "After=zfs-fuse.service zfs-mount.service" in render_ganesha_dropin(LAB).splitlines()
