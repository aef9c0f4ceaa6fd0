"""Pure renderers for the storage layer: the NFS server's exports, its systemd drop-ins and the
clients' mount units, from the stack's `StorageLayer`.

Typed model in, text out, with the "managed by gpu-fleet" header; no host is read. They encode
the layer's contract:
  - models read-only, data read-write, root squashed, the stack's client network only;
  - an unmounted dataset is never served as the empty directory under it (the seed's `/data`):
    kernel nfsd gets `mp` on both exports, and nfs-server and nfs-ganesha check both
    mountpoints before they start;
  - the server starts after the datasets are mounted (zfs-mount / zfs-fuse).
Two server paths: `kernel` (nfsd, /etc/exports.d) on a real fleet, `ganesha` (nfs-ganesha,
FSAL VFS) where the kernel has no nfsd (the lab). Two client paths: `kernel` NFS mounts, and
`fuse-libnfs`, a TEST DOUBLE of the kernel client for kernels without one.
"""

from __future__ import annotations

from .config import StorageLayer, StoreSpec
from ..slurm.render import HEADER

EXPORTS_FILE = "/etc/exports.d/gpu-fleet.exports"
GANESHA_CONF = "/etc/ganesha/ganesha.conf"
#: installed by the layer (scripts/mounted.sh): exits 0 only when `zfs get mounted` says yes
#: and findmnt shows the dataset at its mountpoint
MOUNTED_CHECK = "/usr/local/lib/gpu-fleet/storage-mounted"
#: installed by the layer (scripts/ganesha_ready.sh): exits 0 once ganesha answers on D-Bus
GANESHA_READY = "/usr/local/lib/gpu-fleet/storage-ganesha-ready"
#: how long a ganesha start may take to answer on D-Bus before the start fails
GANESHA_READY_S = 30
DUTIES = ("models", "data")
EXPORT_IDS = {"models": 1, "data": 2}
#: the paths clients mount through ganesha's pseudo filesystem (NFSv4, and NFSv3 MOUNT with
#: mount_path_pseudo); kernel nfsd clients mount the mountpoint itself
PSEUDO = {"models": "/models", "data": "/data"}
#: the nobody user and group: where root_squash maps root
NOBODY_ID = 65534
#: kernel NFS client mount options besides ro/rw: a hard mount over TCP, NFS 4.2
KERNEL_MOUNT_OPTIONS = ("vers=4.2", "hard", "proto=tcp", "nosuid", "nodev", "_netdev")
#: the FUSE client (test double): every user sees the mount (jobs do not run as root)
FUSE_MOUNT_OPTIONS = ("allow_other", "nosuid", "nodev", "_netdev")
FUSE_FSTYPE = "fuse.nfsfuse"

_MODE = {"models": "ro", "data": "rw"}
_WHAT = {"models": "read-only", "data": "read-write"}
#: characters systemd keeps as they are in a unit name built from a path
_UNIT_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.")


def _store(st: StorageLayer, duty: str) -> StoreSpec:
    if duty not in DUTIES:
        raise ValueError(f"storage duty {duty!r}: expected one of {', '.join(DUTIES)}")
    return getattr(st, duty)


def _clients(st: StorageLayer) -> str:
    if st.clients is None:
        raise ValueError("storage.clients is not set: the network that may mount the exports")
    return str(st.clients)


def _lines(*lines: str) -> str:
    return "\n".join([HEADER, *lines]) + "\n"


def render_exports(st: StorageLayer) -> str:
    """The layer's file in /etc/exports.d (kernel nfsd), one line per store."""
    net = _clients(st)
    out = [
        "# The storage layer's NFS exports (kernel nfsd): models read-only, data read-write, root",
        "# squashed, to the compute network only. `mp`: nfsd refuses to export a path no filesystem",
        "# is mounted on, so an unmounted dataset is never served as the empty directory under it.",
    ]
    for duty in DUTIES:
        s = _store(st, duty)
        out += [f"# {duty}: {s.dataset}, {_WHAT[duty]}",
                f"{s.mountpoint} {net}({_MODE[duty]},root_squash,sync,no_subtree_check,mp,sec=sys)"]
    return _lines(*out)


def _ganesha_access() -> list[str]:
    """The options EXPORT_DEFAULTS and every EXPORT repeat: nobody by default, root squashed."""
    return [
        "    # nobody gets in unless a CLIENT block names them",
        "    Access_Type = None;",
        "    Squash = root_squash;",
        "    # without these, root_squash maps root to 4294967294 rather than nobody",
        f"    Anonymous_Uid = {NOBODY_ID};",
        f"    Anonymous_Gid = {NOBODY_ID};",
        "    SecType = sys;",
        "    Protocols = 3, 4;",
        "    Transports = TCP;",
    ]


def render_ganesha_conf(st: StorageLayer) -> str:
    """nfs-ganesha's config (FSAL VFS) with the kernel path's contract."""
    net = _clients(st)
    out = [
        "# nfs-ganesha (FSAL VFS), the storage layer's NFS server where the kernel has no nfsd: the",
        "# same contract as the kernel path (models read-only, data read-write, root squashed, the",
        "# compute network only). Ganesha has no `mp` option: its unit's drop-in checks both",
        "# mountpoints before every start.",
        "",
        "NFS_CORE_PARAM {",
        "    # NFSv3 for libnfs clients, NFSv4 for the rest",
        "    Protocols = 3, 4;",
        "    # NFSv3 MOUNT takes the pseudo paths (/models, /data), as NFSv4 clients do",
        "    mount_path_pseudo = true;",
        "    # no lock manager or quota service: nothing here uses them",
        "    Enable_NLM = false;",
        "    Enable_RQUOTA = false;",
        "}",
        "",
        "NFSv4 {",
        "    # no 90 s grace period after every restart (no client reclaims NFSv4 state here)",
        "    Graceless = true;",
        "    # owners as numeric ids: the fleet's ids are fixed, there is no idmap domain",
        "    Only_Numeric_Owners = true;",
        "}",
        "",
        "EXPORT_DEFAULTS {",
        *_ganesha_access(),
        "}",
    ]
    for duty in DUTIES:
        s = _store(st, duty)
        out += [
            "",
            f"# {duty}: {s.dataset}, {_WHAT[duty]}",
            "EXPORT {",
            f"    Export_Id = {EXPORT_IDS[duty]};",
            f"    Path = {s.mountpoint};",
            f"    Pseudo = {PSEUDO[duty]};",
            *_ganesha_access(),
            "    FSAL {",
            "        Name = VFS;",
            "    }",
            "    CLIENT {",
            f"        Clients = {net};",
            f"        Access_Type = {_MODE[duty].upper()};",
            "    }",
            "}",
        ]
    out += ["", "LOG {", "    Default_Log_Level = EVENT;", "}"]
    return _lines(*out)


def mount_unit_name(path: str) -> str:
    """The .mount unit systemd requires for `path` (`systemd-escape --path --suffix=mount`):
    '/' becomes '-', a '.' leading the name and every character but letters, digits, ':' '_'
    '.' become `\\xNN`; `/` itself is `-.mount`."""
    if not path.startswith("/"):
        raise ValueError(f"{path!r}: a mount point is an absolute path")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{path!r}: a mount point has no '..'")
    if not parts:
        return "-.mount"
    out = []
    for i, ch in enumerate("/".join(parts)):
        if ch == "/":
            out.append("-")
        elif ch in _UNIT_SAFE and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend(f"\\x{b:02x}" for b in ch.encode())
    return "".join(out) + ".mount"


def _host(server: str) -> str:
    """A server address as NFS mount sources spell it (an IPv6 address in brackets)."""
    return f"[{server}]" if ":" in server and not server.startswith("[") else server


def render_mount_unit(st: StorageLayer, duty: str, server: str) -> tuple[str, str]:
    """(unit name, text) of the mount unit a Slurm node mounts one store with."""
    s = _store(st, duty)
    mode = _MODE[duty]
    if st.client == "kernel":
        what, fstype = f"{_host(server)}:{s.mountpoint}", "nfs"
        options: tuple[str, ...] = (mode, *KERNEL_MOUNT_OPTIONS)
        note = [f"# The kernel NFS client, NFS 4.2 over TCP, hard: {_WHAT[duty]}."]
    else:
        what, fstype = f"{_host(server)}:{PSEUDO[duty]}", FUSE_FSTYPE
        options = (mode, *FUSE_MOUNT_OPTIONS)
        note = ["# TEST DOUBLE of the kernel NFS client (storage.client: fuse-libnfs): a FUSE filesystem",
                "# over libnfs speaking real NFS to the real server, for kernels without an NFS client.",
                f"# The server enforces {_WHAT[duty]}; `{mode}` here only says the same."]
    text = _lines(
        *note,
        "[Unit]",
        f"Description=gpu-fleet {duty} store ({_WHAT[duty]}) from {server}",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Mount]",
        f"What={what}",
        f"Where={s.client_mount}",
        f"Type={fstype}",
        f"Options={','.join(options)}",
        "TimeoutSec=30",
        "",
        "[Install]",
        "WantedBy=remote-fs.target",
    )
    return mount_unit_name(s.client_mount), text


def _mounted_checks(st: StorageLayer) -> list[str]:
    return [f"ExecStartPre={MOUNTED_CHECK} {_store(st, d).dataset} {_store(st, d).mountpoint}"
            for d in DUTIES]


def render_nfs_server_dropin(st: StorageLayer | None = None) -> str:
    """nfs-server.service's drop-in (kernel path): start after the datasets are mounted (the
    seed's failure: exports before datasets). With `st`, also refuse to start while a store is
    not mounted as its dataset: belt and braces with `mp`, and a failed unit that says why where
    `mp` only has mountd refuse quietly."""
    out = [
        "# nfs-server starts after ZFS has mounted the datasets it exports.",
        "[Unit]",
        "After=zfs-mount.service",
        "Requires=zfs-mount.service",
    ]
    if st is not None:
        out += [
            "",
            "# and not at all while a store is not mounted as its dataset (`mp` in the exports",
            "# refuses such a path too, at each mount request; this makes the unit fail and say why)",
            "[Service]",
            *_mounted_checks(st),
        ]
    return _lines(*out)


def render_ganesha_dropin(st: StorageLayer) -> str:
    """nfs-ganesha.service's drop-in: start after the datasets are mounted, and never while a
    store is not mounted as its dataset. Ganesha has no `mp`: these checks run before every
    start and restart, also after a reboot; the start ends once ganesha answers on D-Bus, so
    what follows it finds a serving server. ExecReload stays Debian's (a reload re-reads the
    config, not the mounts: the layer's export check runs after it)."""
    return _lines(
        "[Unit]",
        "# zfs-fuse.service in the lab (user-space ZFS), zfs-mount.service with kernel ZFS",
        "After=zfs-fuse.service zfs-mount.service",
        "",
        "[Service]",
        "# ganesha has no `mp` export option: refuse to (re)start while a store is not mounted as",
        "# its dataset, so an unmounted dataset is never exported as the empty directory under it",
        *_mounted_checks(st),
        "# `active` once ganesha answers on D-Bus (it forks before reading its exports)",
        f"ExecStartPost={GANESHA_READY} {GANESHA_READY_S}",
    )
