"""The storage layer's parsers and judges, on output written as the real tools print it."""

from __future__ import annotations

import pytest

from components.config.load import parse_fleet_config
from components.facts.mounts import Mount, parse_findmnt
from components.facts.zfs import parse_zfs_get, parse_zpool_list
from components.layers.storage.parse import (
    GaneshaExport, judge_dataset, judge_exports, judge_ganesha_export, judge_mounts,
    parse_exportfs_v, parse_ganesha_export, parse_proc_nfsd_exports, pool_problem,
)

from tests.conftest import stack_config

NET = "10.213.99.0/24"


def storage(**section):
    raw = stack_config("canary")
    raw["gpu-fleet:nodes"][0]["address"] = "10.213.99.21"
    raw["gpu-fleet:storage"] = {"enabled": True, "clients": NET, **section}
    return parse_fleet_config(raw, "canary").storage


ST = storage()
LAB = storage(server="ganesha", client="fuse-libnfs")

# ---- zfs get / zpool ------------------------------------------------------------------------

ZFS_GET = """\
ai/models\tmountpoint\t/srv/ai/models\tlocal
ai/models\treadonly\ton\tlocal
ai/models\tcanmount\ton\tdefault
ai/models\tsharenfs\toff\tlocal
ai/models\tmounted\tyes\t-
ai/models\tguid\t13727618432016262513\t-
ai/data\tmountpoint\t/srv/ai/data\tlocal
ai/data\treadonly\toff\tdefault
ai/data\tcanmount\ton\tdefault
ai/data\tsharenfs\toff\tlocal
ai/data\tmounted\tyes\t-
ai/data\tguid\t5208323176352090721\t-
"""


def test_parse_zfs_get():
    got = parse_zfs_get(ZFS_GET)
    assert set(got) == {"ai/models", "ai/data"}
    assert got["ai/models"]["readonly"] == ("on", "local")
    assert got["ai/data"]["mounted"] == ("yes", "-")
    assert got["ai/models"]["guid"] == ("13727618432016262513", "-")


def test_zfs_fuse_temporary_readonly_keeps_its_source():
    """zfs-fuse: readonly=on set locally, the dataset mounted rw: `off temporary`."""
    text = ZFS_GET.replace("ai/models\treadonly\ton\tlocal", "ai/models\treadonly\toff\ttemporary")
    got = parse_zfs_get(text)
    assert got["ai/models"]["readonly"] == ("off", "temporary")
    assert judge_dataset(ST, "models", got["ai/models"]) == []  # the caller probes the mount


def test_parse_zfs_get_skips_error_lines_and_keeps_values_with_spaces():
    text = ("cannot open 'ai/data': dataset does not exist\n"
            "ai/models\tmountpoint\t/srv/ai/models\tinherited from ai\n"
            "ai/models\tcomment\ta b\tlocal\n\n")
    got = parse_zfs_get(text)
    assert got == {"ai/models": {"mountpoint": ("/srv/ai/models", "inherited from ai"),
                                 "comment": ("a b", "local")}}


def test_judge_dataset():
    got = parse_zfs_get(ZFS_GET)
    assert judge_dataset(ST, "models", got["ai/models"]) == []
    assert judge_dataset(ST, "data", got["ai/data"]) == []
    assert judge_dataset(ST, "data", None) == ["dataset ai/data (data) does not exist (zfs get printed nothing for it)"]
    bad = parse_zfs_get(ZFS_GET.replace("ai/data\tmounted\tyes\t-", "ai/data\tmounted\tno\t-")
                        .replace("ai/data\tsharenfs\toff\tlocal", "ai/data\tsharenfs\trw=@10.0.0.0/8\tlocal")
                        .replace("ai/models\treadonly\ton\tlocal", "ai/models\treadonly\toff\tdefault"))
    assert judge_dataset(ST, "data", bad["ai/data"]) == [
        "dataset ai/data (data) has mounted=no (-), expected mounted=yes",
        "dataset ai/data (data) has sharenfs=rw=@10.0.0.0/8 (local), expected sharenfs=off",
    ]
    assert judge_dataset(ST, "models", bad["ai/models"]) == [
        "dataset ai/models (models) has readonly=off (default), expected readonly=on"]


def test_parse_zpool_list():
    assert parse_zpool_list("ai\tONLINE\ntank\tDEGRADED\n") == {"ai": "ONLINE", "tank": "DEGRADED"}
    assert parse_zpool_list("cannot open 'ai': no such pool\n") == {}
    assert parse_zpool_list("") == {}


DEGRADED = """\
  pool: ai
 state: DEGRADED
status: One or more devices could not be opened.  Sufficient replicas exist for
\tthe pool to continue functioning in a degraded state.
action: Attach the missing device and online it using 'zpool online'.
   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-2Q
  scan: none requested
config:

\tNAME                      STATE     READ WRITE CKSUM
\tai                        DEGRADED     0     0     0
\t  mirror-0                DEGRADED     0     0     0
\t    /var/lib/lab/disk0    ONLINE       0     0     0
\t    /var/lib/lab/disk1    UNAVAIL      0     0     0  cannot open

errors: No known data errors
"""

# zfs-fuse 0.7 prints the older layout (`scrub:`, sun.com links)
UNAVAIL = """\
  pool: ai
 state: UNAVAIL
status: One or more devices could not be opened.  There are insufficient
\treplicas for the pool to continue functioning.
action: Attach the missing device and online it using 'zpool online'.
   see: http://www.sun.com/msg/ZFS-8000-3C
 scrub: none requested
config:

\tNAME                     STATE     READ WRITE CKSUM
\tai                       UNAVAIL      0     0     0  insufficient replicas
\t  mirror-0               UNAVAIL      0     0     0  insufficient replicas
\t    /var/lib/lab/disk0   UNAVAIL      0     0     0  cannot open
\t    /var/lib/lab/disk1   UNAVAIL      0     0     0  cannot open
"""


def test_pool_online():
    assert pool_problem("ai", "ONLINE", "  pool: ai\n state: ONLINE\n") == (None, None)


def test_pool_degraded_warns_quoting_zpool_status():
    fatal, warning = pool_problem("ai", "DEGRADED", DEGRADED)
    assert fatal is None
    assert warning.startswith("pool 'ai' is DEGRADED: it still serves")
    assert ("status: One or more devices could not be opened.  Sufficient replicas exist for the pool "
            "to continue functioning in a degraded state.") in warning
    assert "/var/lib/lab/disk1 UNAVAIL cannot open" in warning
    assert "disk0" not in warning  # ONLINE devices are not news


@pytest.mark.parametrize("health", ["UNAVAIL", "FAULTED", "SUSPENDED", "REMOVED", "OFFLINE", "WEIRD"])
def test_pool_beyond_redundancy_is_fatal(health):
    fatal, warning = pool_problem("ai", health, UNAVAIL)
    assert warning is None
    assert fatal.startswith(f"pool 'ai' is {health}:")
    assert "There are insufficient replicas for the pool to continue functioning." in fatal
    assert "/var/lib/lab/disk0 UNAVAIL cannot open" in fatal


def test_pool_not_imported_is_fatal():
    fatal, warning = pool_problem("ai", None, "cannot open 'ai': no such pool\n")
    assert warning is None
    assert fatal == ("pool 'ai' is not imported: zpool status says: cannot open 'ai': no such pool. The "
                     "layer never imports or creates a pool: import it (`zpool import ai`) and run "
                     "`pulumi up` again")
    assert "zpool status printed nothing" in pool_problem("ai", None, "")[0]


# ---- findmnt --------------------------------------------------------------------------------

FINDMNT = ('TARGET="/srv/ai/models" SOURCE="ai/models" FSTYPE="fuse.zfs" '
           'OPTIONS="ro,relatime,user_id=0,group_id=0,default_permissions,allow_other"\n')
ROOT_DISK = ('TARGET="/" SOURCE="overlay" FSTYPE="overlay" OPTIONS="rw,relatime,lowerdir=/var/lib/'
             'lab/base,upperdir=/var/lib/lab/storage/upper,workdir=/var/lib/lab/storage/work"\n')


def test_parse_findmnt():
    assert parse_findmnt(FINDMNT) == [Mount("/srv/ai/models", "ai/models", "fuse.zfs",
                                            ("ro", "relatime", "user_id=0", "group_id=0",
                                             "default_permissions", "allow_other"))]
    m = parse_findmnt(ROOT_DISK)[0]
    assert (m.target, m.source, m.fstype) == ("/", "overlay", "overlay")
    assert m.options[:2] == ("rw", "relatime")


def test_a_mount_made_again_under_a_reused_id_is_another_mount():
    """The kernel reuses the lowest free mount ID: a store unmounted and mounted again can get
    the same ID and a new device, and ganesha's handles (which carry the device) go stale."""
    line = 'TARGET="/srv/ai/data" SOURCE="ai/data" FSTYPE="fuse.zfs" OPTIONS="rw" ID="412" MAJ:MIN="0:{}"\n'
    before, after = (parse_findmnt(line.format(m))[0] for m in (52, 57))
    assert before.mount_id == "412 0:52"
    assert before.mount_id != after.mount_id


def test_parse_findmnt_escapes_and_errors():
    # findmnt -P writes " \ ` $ and unprintable bytes as \xNN; blanks stay as they are
    text = ('findmnt: /srv/ai/nothing: not found\n'
            'TARGET="/mnt/a b\\x24c\\x22d" SOURCE="srv:/x\\x5cy" FSTYPE="nfs4" OPTIONS="rw,vers=4.2"\n'
            'TARGET="/mnt/caf\\xc3\\xa9" SOURCE="" FSTYPE="tmpfs" OPTIONS=""\n')
    got = parse_findmnt(text)
    assert got[0] == Mount('/mnt/a b$c"d', "srv:/x\\y", "nfs4", ("rw", "vers=4.2"))
    assert got[1] == Mount("/mnt/café", "", "tmpfs", ())
    assert parse_findmnt("") == []


def test_judge_server_mounts():
    assert judge_mounts(ST, "models", parse_findmnt(FINDMNT)[0], "server") == []
    kernel = Mount("/srv/ai/data", "ai/data", "zfs", ("rw", "xattr", "noacl"))
    assert judge_mounts(ST, "data", kernel, "server") == []


def test_the_seeds_empty_directory_on_the_root_disk():
    """The seed's /data: the directory exists, the dataset is not mounted on it."""
    assert judge_mounts(ST, "data", parse_findmnt(ROOT_DISK)[0], "server") == [
        "/srv/ai/data is not the mountpoint of ai/data: findmnt -T shows / (overlay from overlay) — "
        "the directory is on the root filesystem, not the dataset"]


@pytest.mark.parametrize("mount, expected", [
    (None, "/srv/ai/data is not the mountpoint of ai/data: findmnt -T shows nothing"),
    (Mount("/srv", "/dev/sdb1", "ext4", ("rw",)),
     "/srv/ai/data is not the mountpoint of ai/data: findmnt -T shows /srv (ext4 from /dev/sdb1) — the "
     "directory is on the filesystem mounted at /srv, not the dataset"),
    (Mount("/srv/ai/data", "tmpfs", "tmpfs", ("rw",)),
     "/srv/ai/data is not the mountpoint of ai/data: findmnt -T shows /srv/ai/data (tmpfs from tmpfs) — "
     "another filesystem is mounted there"),
    (Mount("/srv/ai/data", "ai/data", "fuse.sshfs", ("rw",)),
     "/srv/ai/data is mounted from ai/data as fuse.sshfs, not as ZFS"),
])
def test_judge_server_mount_failures_name_what_findmnt_saw(mount, expected):
    fails = judge_mounts(ST, "data", mount, "server")
    assert len(fails) == 1 and fails[0].startswith(expected), fails


def test_judge_client_mounts():
    models = Mount("/mnt/models", "10.213.99.10:/srv/ai/models", "nfs4",
                   ("ro", "nosuid", "nodev", "relatime", "vers=4.2", "hard", "proto=tcp"))
    assert judge_mounts(ST, "models", models, "client") == []
    fuse = Mount("/mnt/data", "10.213.99.10:/data", "fuse.nfsfuse",
                 ("rw", "nosuid", "nodev", "relatime", "user_id=0", "group_id=0", "allow_other"))
    assert judge_mounts(LAB, "data", fuse, "client") == []
    assert judge_mounts(ST, "models", None, "client") == ["/mnt/models is not mounted (findmnt -M shows nothing)"]
    rw = Mount("/mnt/models", "10.213.99.10:/srv/ai/models", "nfs4", ("rw", "vers=4.2"))
    assert judge_mounts(ST, "models", rw, "client") == [
        "/mnt/models is mounted rw,vers=4.2, expected ro"]
    local = Mount("/mnt/models", "/dev/sda1", "ext4", ("ro",))
    assert judge_mounts(ST, "models", local, "client") == [
        "/mnt/models is /dev/sda1 (ext4), expected <server>:/srv/ai/models (nfs or nfs4)"]
    with pytest.raises(ValueError):
        judge_mounts(ST, "models", models, "elsewhere")


# ---- exportfs -v and /proc/fs/nfsd/exports --------------------------------------------------

# nfs-utils 2.6: the path padded to 14 columns then a tab; a longer path puts its client on the
# next line after two tabs; ro/rw and the squash flags follow sec=
EXPORTFS_V = """\
/srv/ai/models\t10.213.99.0/24(sync,wdelay,hide,no_subtree_check,mountpoint,sec=sys,ro,secure,root_squash,no_all_squash)
/srv/ai/data  \t10.213.99.0/24(sync,wdelay,hide,no_subtree_check,mountpoint,sec=sys,rw,secure,root_squash,no_all_squash)
"""
LONG = "/srv/ai/models-archive\n\t\t10.213.99.0/24(sync,wdelay,hide,no_subtree_check,sec=sys,ro,secure,root_squash,no_all_squash)\n"
WORLD = "/export       \t<world>(sync,wdelay,hide,no_subtree_check,sec=sys,rw,secure,no_root_squash,no_all_squash)\n"

PROC = """\
# Version 1.1
# Path Client(Flags) # IPs
/srv/ai/models\t10.213.99.0/24(ro,root_squash,sync,wdelay,no_subtree_check,uuid=5d3f1a2b:7c4e4f10:9a8b7c6d:5e4f3a2b,sec=1)
/srv/ai/data\t10.213.99.0/24(rw,root_squash,sync,wdelay,no_subtree_check,uuid=0c1d2e3f:4a5b6c7d:8e9fa0b1:c2d3e4f5,sec=1)
"""


def test_parse_exportfs_v():
    got = parse_exportfs_v(EXPORTFS_V)
    assert set(got) == {"/srv/ai/models", "/srv/ai/data"}
    assert got["/srv/ai/models"] == {NET: {"sync", "wdelay", "hide", "no_subtree_check", "mountpoint",
                                           "sec=sys", "ro", "secure", "root_squash", "no_all_squash"}}
    assert "rw" in got["/srv/ai/data"][NET]
    assert judge_exports(ST, got) == []


def test_parse_exportfs_v_wrapped_lines_world_and_errors():
    got = parse_exportfs_v(EXPORTFS_V + LONG + WORLD)
    assert got["/srv/ai/models-archive"] == {NET: {"sync", "wdelay", "hide", "no_subtree_check", "sec=sys",
                                                   "ro", "secure", "root_squash", "no_all_squash"}}
    assert "no_root_squash" in got["/export"]["*"]
    two = "/srv/ai/data  \t10.0.0.0/8(sync,sec=sys,rw)\n/srv/ai/data  \t10.213.99.0/24(sync,sec=sys,ro)\n"
    assert set(parse_exportfs_v(two)["/srv/ai/data"]) == {"10.0.0.0/8", NET}
    assert parse_exportfs_v("exportfs: could not open /var/lib/nfs/.etab.lock for locking: errno 13\n") == {}
    assert parse_exportfs_v("") == {}


def test_parse_proc_nfsd_exports():
    got = parse_proc_nfsd_exports(PROC)
    assert got["/srv/ai/models"][NET] >= {"ro", "root_squash", "sync", "no_subtree_check", "sec=1"}
    assert "rw" in got["/srv/ai/data"][NET]
    # blanks in a path are octal escapes; the header alone: nothing asked for yet (it fills lazily)
    assert set(parse_proc_nfsd_exports("# Version 1.1\n/srv/my\\040data\t*(rw,no_root_squash)\n")) == {"/srv/my data"}
    assert parse_proc_nfsd_exports("# Version 1.1\n# Path Client(Flags) # IPs\n") == {}
    # the kernel knows nothing of mp, so the judge is told not to ask for it
    assert judge_exports(ST, got, require_mp=False) == []
    assert any("lacks mp" in f for f in judge_exports(ST, got))


def test_judge_exports_failures_name_path_client_and_options():
    bad = parse_exportfs_v(
        "/srv/ai/models\t10.213.99.0/24(sync,wdelay,hide,no_subtree_check,mountpoint,sec=sys,rw,secure,"
        "root_squash,no_all_squash)\n"
        "/srv/ai/data  \t10.213.99.0/24(sync,wdelay,hide,no_subtree_check,sec=sys,rw,secure,"
        "no_root_squash,no_all_squash)\n" + WORLD)
    assert judge_exports(ST, bad) == [
        "/srv/ai/models to 10.213.99.0/24 is not read-only (options: hide,mountpoint,no_all_squash,"
        "no_subtree_check,root_squash,rw,sec=sys,secure,sync,wdelay): the models store is exported ro",
        "/srv/ai/data to 10.213.99.0/24 has no_root_squash (options: hide,no_all_squash,no_root_squash,"
        "no_subtree_check,rw,sec=sys,secure,sync,wdelay): root must be squashed",
        "/srv/ai/data to 10.213.99.0/24 lacks mp (options: hide,no_all_squash,no_root_squash,"
        "no_subtree_check,rw,sec=sys,secure,sync,wdelay): nfsd would export the directory even with the "
        "dataset unmounted",
        "/export is exported to everyone (*): export only to 10.213.99.0/24",
    ]


def test_judge_exports_missing_other_clients_and_slash_zero():
    assert judge_exports(ST, {}) == ["/srv/ai/models (models) is not exported (exported: nothing)",
                                     "/srv/ai/data (data) is not exported (exported: nothing)"]
    ok = parse_exportfs_v(EXPORTFS_V)
    wrong_net = {"/srv/ai/models": {"10.0.0.0/8": ok["/srv/ai/models"][NET]}, "/srv/ai/data": ok["/srv/ai/data"]}
    assert judge_exports(ST, wrong_net) == [
        "/srv/ai/models (models) is not exported to 10.213.99.0/24: it is exported to 10.0.0.0/8"]
    extra = {**ok, "/srv/ai/data": {**ok["/srv/ai/data"], "0.0.0.0/0": {"rw", "root_squash", "mountpoint"}}}
    assert judge_exports(ST, extra) == [
        "/srv/ai/data (data) is also exported to 0.0.0.0/0; only 10.213.99.0/24 may mount it",
        "/srv/ai/data is exported to everyone (0.0.0.0/0): export only to 10.213.99.0/24"]
    # the same network written with a netmask is the stack's network
    netmask = {p: {"10.213.99.0/255.255.255.0": o[NET]} for p, o in ok.items()}
    assert judge_exports(ST, netmask) == []
    # mountd joins the names of every client entry an address matches
    joined = parse_proc_nfsd_exports(PROC + "/srv/ai/data\t*,10.213.99.0/24(rw,root_squash,sync)\n")
    assert "/srv/ai/data is exported to everyone (*,10.213.99.0/24): export only to 10.213.99.0/24" in \
        judge_exports(ST, joined, require_mp=False)


# ---- nfs-ganesha over DBus ------------------------------------------------------------------

DISPLAY_EXPORT = (
    'method return time=1796119646.333834 sender=:1.7 -> destination=:1.9 serial=5 reply_serial=2\n'
    '   uint16 2\n   string "/srv/ai/data"\n   string "/data"\n   string ""\n   array [\n'
    '      struct {\n         string "10.213.99.0/24"\n         int32 0\n         byte 0\n'
    '         byte 255\n         int32 1\n         uint32 4294967294\n         uint32 4294967294\n'
    '         uint32 0\n         uint32 53489826\n         uint32 480\n      }\n   ]\n')
ONE_LINE = " ".join(DISPLAY_EXPORT.split())
NOT_FOUND = "Error org.freedesktop.DBus.Error.InvalidArgs: lookup_export failed with Export id not found\n"


@pytest.mark.parametrize("text", [DISPLAY_EXPORT, ONE_LINE, ONE_LINE.replace("array [ struct {", "array\n[\nstruct{")])
def test_parse_ganesha_export(text):
    assert parse_ganesha_export(text) == GaneshaExport(2, "/srv/ai/data", "/data", ("10.213.99.0/24",))


def test_parse_ganesha_export_two_clients_and_none():
    two = ONE_LINE.removesuffix("]") + 'struct { string "10.213.100.5" int32 0 byte 0 } ]'
    assert parse_ganesha_export(two).clients == ("10.213.99.0/24", "10.213.100.5")
    empty = ONE_LINE.split("array [")[0] + "array [ ]"
    assert parse_ganesha_export(empty) == GaneshaExport(2, "/srv/ai/data", "/data", ())
    assert parse_ganesha_export(NOT_FOUND) is None
    assert parse_ganesha_export("Error org.freedesktop.DBus.Error.ServiceUnknown: The name org.ganesha.nfsd "
                                "was not provided by any .service files\n") is None
    assert parse_ganesha_export("") is None


def test_judge_ganesha_export():
    e = parse_ganesha_export(DISPLAY_EXPORT)
    assert judge_ganesha_export(LAB, "data", e) == []
    assert judge_ganesha_export(LAB, "models", None) == ["ganesha does not export /srv/ai/models (models, export 1)"]
    wrong = GaneshaExport(2, "/srv/ai/data", "/data", ("*",))
    assert judge_ganesha_export(LAB, "data", wrong) == [
        "ganesha exports /srv/ai/data to *, expected 10.213.99.0/24 only"]
    assert judge_ganesha_export(LAB, "models", e) == [
        "ganesha export 2 is /srv/ai/data as /data, expected export 1: /srv/ai/models as /models"]
