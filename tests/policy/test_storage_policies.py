"""The storage policies, called directly: the storage layer's rendered files pass, each broken
contract fails with a sentence naming the resource and the fix, unknown values are skipped,
and an export the stack config cannot vouch for is refused."""

from __future__ import annotations

import json

import pytest

from components.config.load import parse_fleet_config
from components.layers.storage.config import StorageLayer
from components.layers.storage import render
from tests.conftest import stack_config

from gpu_fleet_policies import relax, stackconfig, storage
from gpu_fleet_policies.pack import VALIDATORS

from .fakes import CONN, FILE, SYSTEMD_UNIT, UNKNOWN_OBJ, UNKNOWN_STR, Secret, file_args, resource_args, violations

NET = "192.0.2.0/24"
SECTION = {"enabled": True, "clients": NET}
FILE_POLICIES = [storage.validate_export_paths, storage.validate_models_export_readonly,
                 storage.validate_export_root_squash, storage.validate_export_clients]
ALL = FILE_POLICIES + [storage.validate_sharenfs_off, storage.validate_models_mount_readonly]
STORAGE_CONN = {"name": "storage", "address": "192.0.2.10"}


@pytest.fixture(autouse=True)
def _stack():
    relax.reset()
    stackconfig.configure({"gpu-fleet:storage": json.dumps(SECTION)})
    yield
    stackconfig.configure(None)


def layer(**section) -> StorageLayer:
    raw = stack_config("canary")
    raw["gpu-fleet:storage"] = {**SECTION, **section}
    return parse_fleet_config(raw, "canary").storage


def all_violations(args) -> list[str]:
    return [m for v in ALL for m in violations(v, args)]


def exports(text: str, path: str = render.EXPORTS_FILE, name: str = "exports"):
    return file_args(path, text, name, conn=STORAGE_CONN)


def ganesha(text: str, name: str = "ganesha-conf"):
    return file_args(render.GANESHA_CONF, text, name, conn=STORAGE_CONN)


def unit(name: str, content, dropins=None, res: str = "mount"):
    return resource_args(SYSTEMD_UNIT, {"conn": CONN, "name": name, "content": content,
                                        "dropins": dropins or {}, "enabled": True, "active": True}, res)


def datasets(*entries):
    return resource_args(storage.ZFS_DATASETS, {"conn": STORAGE_CONN, "pool": "ai", "datasets": list(entries)},
                         "storage-datasets")


def ds(name: str, **props):
    return {"duty": name.split("/")[-1], "name": name,
            "properties": {"mountpoint": f"/srv/{name}", "readonly": "off", "canmount": "on", **props}}


# ---- the pack and what it mirrors -----------------------------------------------------------

def test_registered():
    for name in ("storage-exports-declared-datasets", "storage-models-export-read-only",
                 "storage-exports-root-squash", "storage-exports-no-world-clients",
                 "storage-zfs-sharenfs-off", "storage-models-mount-read-only"):
        assert name in VALIDATORS


def test_constants_mirror_the_program():
    assert storage.EXPORTS_FILE == render.EXPORTS_FILE and storage.GANESHA_CONF == render.GANESHA_CONF
    assert storage.MODELS_PSEUDO == render.PSEUDO["models"]
    defaults = StorageLayer()
    for duty, spec in storage.DEFAULT_STORES.items():
        assert spec == getattr(defaults, duty).model_dump()


# ---- the rendered files pass ----------------------------------------------------------------

@pytest.mark.parametrize("section", [{}, {"server": "ganesha", "client": "fuse-libnfs"},
                                     {"models": {"dataset": "ai/m", "mountpoint": "/tank/m/", "client_mount": "/mnt/m-1"}}])
def test_rendered_storage_files_pass_every_policy(section):
    stackconfig.configure({"gpu-fleet:storage": json.dumps({**SECTION, **section})})
    st = layer(**section)
    assert all_violations(exports(render.render_exports(st))) == []
    assert all_violations(ganesha(render.render_ganesha_conf(st))) == []
    for duty in render.DUTIES:
        name, text = render.render_mount_unit(st, duty, "192.0.2.10")
        assert all_violations(unit(name, text)) == [], name
    for name, dropin in [("nfs-server.service", render.render_nfs_server_dropin(st)),
                         ("nfs-ganesha.service", render.render_ganesha_dropin(st))]:
        assert all_violations(unit(name, None, {"gpu-fleet.conf": dropin})) == []
    assert all_violations(datasets(ds("ai/models", readonly="on", sharenfs="off"),
                                   ds("ai/data", sharenfs="off"))) == []


# ---- export paths ---------------------------------------------------------------------------

def test_export_of_an_undeclared_path():
    text = render.render_exports(layer()) + f"/srv/scratch {NET}(rw,root_squash,mp)\n"
    msgs = violations(storage.validate_export_paths, exports(text))
    assert msgs == [
        'File "exports" (/etc/exports.d/gpu-fleet.exports on storage) exports /srv/scratch (line 10), which '
        "is not the mountpoint of a dataset the stack declares (gpu-fleet:storage: models ai/models at "
        "/srv/ai/models, data ai/data at /srv/ai/data); export only those mountpoints, so a directory that "
        "is not a dataset is never served."]
    # a subdirectory of a dataset, or its parent, is not its mountpoint either
    for path in ("/srv/ai/data/jobs", "/srv/ai", "/srv/ai/models/."):
        got = violations(storage.validate_export_paths, exports(f"{path} {NET}(rw)\n", "/etc/exports"))
        assert len(got) == (0 if path.endswith("/.") else 1), path


def test_ganesha_export_of_an_undeclared_path_or_none():
    conf = render.render_ganesha_conf(layer()).replace("Path = /srv/ai/data;", "Path = /srv/ai;")
    msgs = violations(storage.validate_export_paths, ganesha(conf))
    assert len(msgs) == 1 and "exports /srv/ai (EXPORT block 2), which is not the mountpoint" in msgs[0]
    msgs = violations(storage.validate_export_paths, ganesha("EXPORT { Export_Id = 3; Pseudo = /x; }"))
    assert msgs and "has an export without a Path (EXPORT block 1)" in msgs[0]


def test_storage_off_declares_no_dataset():
    stackconfig.configure({"gpu-fleet:storage": {"enabled": False}})
    msgs = violations(storage.validate_export_paths, exports(render.render_exports(layer())))
    assert len(msgs) == 2 and all("gpu-fleet:storage is not enabled, so it declares none" in m for m in msgs)
    stackconfig.configure({})
    assert len(violations(storage.validate_export_paths, exports(render.render_exports(layer())))) == 2


def test_no_stack_config_fails_closed():
    stackconfig.configure(None)
    st = layer()
    msgs = all_violations(exports(render.render_exports(st)))
    assert msgs == [
        'File "exports" (/etc/exports.d/gpu-fleet.exports on storage) exports /srv/ai/data, /srv/ai/models, but '
        f"{storage.NO_CONFIG}.",
        'File "exports" (/etc/exports.d/gpu-fleet.exports on storage) exports NFS paths; which of them is the '
        f"models store {storage.NO_CONFIG}."]
    name, text = render.render_mount_unit(st, "models", "192.0.2.10")
    assert len(violations(storage.validate_models_mount_readonly, unit(name, text))) == 1
    local = "[Mount]\nWhat=/dev/sdb1\nWhere=/scratch\nType=ext4\n"
    assert violations(storage.validate_models_mount_readonly, unit("scratch.mount", local)) == []


# ---- models read-only -----------------------------------------------------------------------

def test_models_export_read_write():
    text = render.render_exports(layer()).replace(f"{NET}(ro,", f"{NET}(rw,")
    msgs = violations(storage.validate_models_export_readonly, exports(text))
    assert msgs == [
        'File "exports" (/etc/exports.d/gpu-fleet.exports on storage) exports the models store /srv/ai/models '
        "writable to 192.0.2.0/24 (rw,root_squash,sync,no_subtree_check,mp,sec=sys); export it read-only: "
        "`ro` in the client's options (kernel), Access_Type = RO (ganesha)."]
    # the last of ro/rw wins; default options after the path count; the kernel's default is ro
    for line, bad in [(f"/srv/ai/models {NET}(ro,rw)", True), (f"/srv/ai/models -rw {NET}(root_squash)", True),
                      (f"/srv/ai/models {NET}(rw,ro)", False), (f"/srv/ai/models {NET}(root_squash)", False),
                      (f"/srv/ai/models 10.0.0.1(ro) {NET}(rw)", True)]:
        assert bool(violations(storage.validate_models_export_readonly, exports(line + "\n"))) is bad, line
    assert violations(storage.validate_models_export_readonly,
                      exports(f"/srv/ai/data {NET}(rw)\n")) == []  # data is rw


@pytest.mark.parametrize("change, bad", [
    (("Access_Type = RO;", "Access_Type = RW;"), True),
    (("Access_Type = RO;", "Access_Type = MDONLY;"), True),
    (("Access_Type = RO;", "Access_Type = MDONLY_RO;"), False),
    (("Access_Type = RO;", "access_type = \"ro\";"), False),
    # a CLIENT block without its own Access_Type takes the EXPORT's
    (("        Access_Type = RO;\n", ""), False),
])
def test_ganesha_models_export(change, bad):
    conf = render.render_ganesha_conf(layer()).replace(*change, 1)
    assert bool(violations(storage.validate_models_export_readonly, ganesha(conf))) is bad


def test_ganesha_models_writable_through_the_export_level():
    conf = render.render_ganesha_conf(layer())
    models, data = conf.split("# data:")
    models = models.replace("Pseudo = /models;\n    # nobody gets in unless a CLIENT block names them\n"
                            "    Access_Type = None;", "Pseudo = /models;\n    Access_Type = RW;")
    msgs = violations(storage.validate_models_export_readonly, ganesha(models + "# data:" + data))
    # its CLIENT block says RO; every other client gets the EXPORT's RW
    assert len(msgs) == 1 and "writable to * (every client no CLIENT block names" in msgs[0]


# ---- root squash ----------------------------------------------------------------------------

@pytest.mark.parametrize("line, bad", [
    (f"/srv/ai/data {NET}(rw,no_root_squash)", True),
    (f"/srv/ai/data {NET}(rw,root_squash,anonuid=0)", True),
    (f"/srv/ai/data -no_root_squash {NET}(rw)", True),
    (f"/srv/ai/data {NET}(rw,no_root_squash,root_squash)", False),
    (f"/srv/ai/data {NET}(rw)", False),
    (f"/srv/ai/data {NET}(rw,all_squash)", False),
])
def test_kernel_root_squash(line, bad):
    msgs = violations(storage.validate_export_root_squash, exports(line + "\n"))
    assert bool(msgs) is bad
    if bad:
        assert msgs[0].startswith('File "exports" (/etc/exports.d/gpu-fleet.exports on storage) exports '
                                  "/srv/ai/data to 192.0.2.0/24 without squashing root (")
        assert "remove no_root_squash (ganesha: Squash = root_squash)" in msgs[0]


@pytest.mark.parametrize("squash, bad", [("no_root_squash", True), ("None", True), ("NoIdSquash", True),
                                         ("all_squash", False), ("Root", False), ("root_id_squash", False)])
def test_ganesha_root_squash(squash, bad):
    conf = render.render_ganesha_conf(layer())
    conf = conf.replace("        Access_Type = RW;\n", f"        Access_Type = RW;\n        Squash = {squash};\n")
    assert bool(violations(storage.validate_export_root_squash, ganesha(conf))) is bad


def test_ganesha_squash_inherits_and_anonymous_uid_zero():
    conf = render.render_ganesha_conf(layer())
    # the defaults say no_root_squash, every EXPORT overrides it: fine
    assert violations(storage.validate_export_root_squash,
                      ganesha(conf.replace("Squash = root_squash;", "Squash = no_root_squash;", 1))) == []
    # the EXPORT says no_root_squash: its CLIENT blocks inherit it
    data = conf.rsplit("Squash = root_squash;", 1)
    assert len(violations(storage.validate_export_root_squash,
                          ganesha("Squash = no_root_squash;".join(data)))) == 1
    zero = conf.replace("Anonymous_Uid = 65534;", "Anonymous_Uid = 0;")
    assert len(violations(storage.validate_export_root_squash, ganesha(zero))) == 2
    # no access at all: nothing to squash
    none = "EXPORT { Path = /srv/ai/data; CLIENT { Clients = *; Access_Type = None; Squash = None; } }"
    assert violations(storage.validate_export_root_squash, ganesha(none)) == []


# ---- everyone -------------------------------------------------------------------------------

@pytest.mark.parametrize("line, client", [
    ("/srv/ai/data *(rw,root_squash)", "*"),
    ("/srv/ai/data 0.0.0.0/0(rw)", "0.0.0.0/0"),
    ("/srv/ai/data ::/0(rw)", "::/0"),
    ("/srv/ai/data 10.0.0.0/0(rw)", "10.0.0.0/0"),
    ("/srv/ai/data 0.0.0.0/0.0.0.0(rw)", "0.0.0.0/0.0.0.0"),
    ("/srv/ai/data", "* (no client named: exports(5) makes that everyone)"),
    ("/srv/ai/data (rw)", "* (no client named: exports(5) makes that everyone)"),
])
def test_kernel_export_to_everyone(line, client):
    msgs = violations(storage.validate_export_clients, exports(line + "\n"))
    assert msgs == [f'File "exports" (/etc/exports.d/gpu-fleet.exports on storage) exports /srv/ai/data to '
                    f"everyone ({client}); name the stack's client network (gpu-fleet:storage.clients) "
                    "instead (ganesha: Access_Type = None at the EXPORT level and a CLIENT block for that "
                    "network)."]


def test_kernel_clients_comments_and_continuations():
    text = ('# /srv/ai/data *(rw)\n"/srv/ai/data" 192.0.2.0/24(rw) \\\n   10.0.0.0/8(rw)  # the lab\n'
            "/srv/my\\040data 10.0.0.0/8(rw)\n")
    assert violations(storage.validate_export_clients, exports(text)) == []
    paths = [e.path for e in storage.parse_exports(text)]
    assert paths == ["/srv/ai/data", "/srv/my data"]
    assert [a.client for a in storage.parse_exports(text)[0].access] == ["192.0.2.0/24", "10.0.0.0/8"]


@pytest.mark.parametrize("change, bad", [
    (("Clients = 192.0.2.0/24;", "Clients = *;"), True),
    (("Clients = 192.0.2.0/24;", "Clients = 10.1.0.0/16, 0.0.0.0/0;"), True),
    (("Clients = 192.0.2.0/24;", 'Clients = "::/0";'), True),
    (("    Access_Type = None;\n    Squash", "    Access_Type = RO;\n    Squash"), True),
    (("Clients = 192.0.2.0/24;", "Clients = 10.1.0.0/16, 192.0.2.0/24;"), False),
    (("Clients = 192.0.2.0/24;", "Clients = 192.0.2.0/24;\n        Clients = *;"), True),
])
def test_ganesha_export_to_everyone(change, bad):
    conf = render.render_ganesha_conf(layer()).replace(*change)
    assert bool(violations(storage.validate_export_clients, ganesha(conf))) is bad


def test_ganesha_defaults_apply_where_the_export_is_silent():
    conf = ("EXPORT_DEFAULTS { Access_Type = RW; }\n"
            "EXPORT { Export_Id = 2; Path = /srv/ai/data; Pseudo = /data; FSAL { Name = VFS; }\n"
            "  CLIENT { Clients = 192.0.2.0/24; Access_Type = RW } }\n")
    msgs = violations(storage.validate_export_clients, ganesha(conf))
    assert len(msgs) == 1 and "everyone (* (every client no CLIENT block names" in msgs[0]


def test_ganesha_parser():
    root = storage.parse_ganesha('# c\nEXPORT {\n  Path = "/srv/a b";  # why\n  CLIENT { Clients = 1.2.3.4, '
                                 "'5.6.7.0/24'; }\n  Protocols = 3, 4\n}\nLOG { Default_Log_Level = EVENT; }")
    exp = root.children("export")[0]
    assert exp.get("path") == "/srv/a b" and exp.get("PROTOCOLS") == "3, 4"
    assert storage._list(exp.children("CLIENT")[0].get("Clients")) == ["1.2.3.4", "5.6.7.0/24"]
    assert [b.name for b in root.blocks] == ["EXPORT", "LOG"]


# ---- sharenfs -------------------------------------------------------------------------------

def test_sharenfs_off():
    bad = datasets(ds("ai/models", readonly="on", sharenfs="on"), ds("ai/data"))
    assert violations(storage.validate_sharenfs_off, bad) == [
        'ZfsDatasets "storage-datasets" (on storage) sets sharenfs=on on ai/models; set sharenfs=off: the '
        "storage layer owns the export, and ZFS sharing the dataset too would export it behind its back.",
        'ZfsDatasets "storage-datasets" (on storage) does not set sharenfs (it inherits it) on ai/data; set '
        "sharenfs=off: the storage layer owns the export, and ZFS sharing the dataset too would export it "
        "behind its back."]
    rw = datasets(ds("ai/data", sharenfs="rw=@192.0.2.0/24"))
    assert "sets sharenfs=rw=@192.0.2.0/24 on ai/data" in violations(storage.validate_sharenfs_off, rw)[0]


def test_sharenfs_unknown_is_skipped():
    assert violations(storage.validate_sharenfs_off, datasets(ds("ai/data", sharenfs=UNKNOWN_STR))) == []
    assert violations(storage.validate_sharenfs_off,
                      resource_args(storage.ZFS_DATASETS, {"datasets": UNKNOWN_OBJ}, "d")) == []
    assert violations(storage.validate_sharenfs_off, resource_args(storage.ZFS_DATASETS, {}, "d")) == []


# ---- client mounts --------------------------------------------------------------------------

def test_models_mount_read_write():
    name, text = render.render_mount_unit(layer(), "models", "192.0.2.10")
    bad = text.replace("Options=ro,", "Options=rw,")
    assert violations(storage.validate_models_mount_readonly, unit(name, bad, res="mnt-models")) == [
        'SystemdUnit "mnt-models" (mnt-models.mount on gpu01) mounts the models store (192.0.2.10:/srv/ai/models) '
        "at /mnt/models with Options=rw,vers=4.2,hard,proto=tcp,nosuid,nodev,_netdev; put ro in Options= "
        "(and no rw after it): the model store is read-only on every node."]
    no_opts = "\n".join(line for line in text.splitlines() if not line.startswith("Options="))
    assert "no Options= (mounts default to rw)" in violations(
        storage.validate_models_mount_readonly, unit(name, no_opts))[0]
    later_rw = text.replace("_netdev", "_netdev,rw")
    assert violations(storage.validate_models_mount_readonly, unit(name, later_rw))


def test_models_mount_found_by_where_name_or_export():
    _, text = render.render_mount_unit(layer(), "models", "192.0.2.10")
    rw = text.replace("Options=ro,", "Options=rw,")
    # no Where=: the unit's name says where
    no_where = "\n".join(line for line in rw.splitlines() if not line.startswith("Where="))
    assert violations(storage.validate_models_mount_readonly, unit("mnt-models.mount", no_where))
    # the models export mounted somewhere else, by path or by ganesha's pseudo path
    elsewhere = rw.replace("Where=/mnt/models", "Where=/opt/models")
    assert violations(storage.validate_models_mount_readonly, unit("opt-models.mount", elsewhere))
    pseudo = elsewhere.replace("192.0.2.10:/srv/ai/models", "192.0.2.10:/models")
    assert violations(storage.validate_models_mount_readonly, unit("opt-models.mount", pseudo))
    # a drop-in that resets Options= counts
    name, good = render.render_mount_unit(layer(), "models", "192.0.2.10")
    dropin = "[Mount]\nOptions=\nOptions=rw,hard\n"
    assert violations(storage.validate_models_mount_readonly, unit(name, good, {"override.conf": dropin}))
    # data is rw; other units are not mounts
    _, data = render.render_mount_unit(layer(), "data", "192.0.2.10")
    assert violations(storage.validate_models_mount_readonly, unit("mnt-data.mount", data)) == []
    assert violations(storage.validate_models_mount_readonly, unit("slurmd.service", rw)) == []


def test_mount_unit_unknown_and_secret_content():
    _, text = render.render_mount_unit(layer(), "models", "192.0.2.10")
    assert violations(storage.validate_models_mount_readonly, unit("mnt-models.mount", UNKNOWN_STR)) == []
    bad = text.replace("Options=ro,", "Options=rw,")
    assert violations(storage.validate_models_mount_readonly, unit("mnt-models.mount", Secret(bad)))


@pytest.mark.parametrize("name, path", [("mnt-models.mount", "/mnt/models"), ("-.mount", "/"),
                                        ("mnt-my\\x2ddata.mount", "/mnt/my-data"),
                                        ("\\x2esnap.mount", "/.snap")])
def test_path_of_mount_unit_inverts_the_renderer(name, path):
    assert storage.path_of_mount_unit(name) == path
    assert render.mount_unit_name(path) == name


# ---- what the policies leave alone ----------------------------------------------------------

@pytest.mark.parametrize("content", [None, UNKNOWN_STR, Secret(UNKNOWN_STR), 42.0])
def test_unknown_or_missing_content_is_skipped(content):
    for path in (render.EXPORTS_FILE, render.GANESHA_CONF, "/etc/exports"):
        assert all_violations(exports(content, path)) == []


def test_other_files_are_not_exports():
    for path in ("/etc/slurm/slurm.conf", "/etc/exports.d/README", "/etc/exports.bak"):
        assert all_violations(file_args(path, "/srv/x *(rw,no_root_squash)\n")) == [], path
    assert all_violations(resource_args(FILE, {"conn": CONN, "path": UNKNOWN_STR, "content": "/x *(rw)"})) == []
