"""Pure parsers for what the storage host and the nodes print, and the judges that turn what
they saw into failures: text in, typed out, no host is read.

The probes merge stderr into stdout (`2>&1`), so every parser skips lines that are not its
tool's output rather than failing on them; what a missing line means is the judge's to say.
"Mounted" is always what ZFS and the kernel's mount table say (`zfs get mounted`, `findmnt`),
never that the directory exists: the seed's `/data` was an empty folder on the root disk.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Optional

from .config import StorageLayer
from ...facts.mounts import Mount
from .render import DUTIES, EXPORT_IDS, FUSE_FSTYPE, PSEUDO

#: {path: {client: {option, ...}}}: what a kernel NFS server exports
Exported = dict[str, dict[str, set[str]]]

# ---- ZFS (zfs get and zpool list are read by components/facts/zfs.py) ---------------------

_POOL_HEALTH = ("ONLINE", "DEGRADED", "FAULTED", "OFFLINE", "UNAVAIL", "REMOVED", "SUSPENDED")


def _status_summary(status_text: str) -> str:
    """`zpool status` shortened to one line: its status/action paragraphs and every device
    that is not ONLINE (or the whole text when it is something else, such as an error)."""
    text = status_text.strip()
    if not text:
        return "zpool status printed nothing"
    keep: list[str] = []
    key = None
    in_config = False
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"^\s*(\w+):\s*(.*)$", raw)
        if m and not raw.startswith("\t") and m.group(1) in (
                "pool", "state", "status", "action", "see", "scan", "scrub", "config", "errors"):
            key = m.group(1)
            in_config = key == "config"
            if key in ("status", "action") and m.group(2):
                keep.append(f"{key}: {m.group(2).strip()}")
            elif key == "errors" and m.group(2) and m.group(2) != "No known data errors":
                keep.append(f"errors: {m.group(2).strip()}")
            continue
        if not line:
            continue
        if in_config:
            cols = line.split()
            if len(cols) >= 2 and cols[0] != "NAME" and cols[1] in _POOL_HEALTH and cols[1] != "ONLINE":
                keep.append(f"{cols[0]} {' '.join([cols[1], *cols[5:]])}".strip())
        elif key in ("status", "action") and keep and raw[:1] in ("\t", " "):
            keep[-1] += " " + line
    return "; ".join(keep) if keep else " ".join(text.split())


def pool_problem(pool: str, health: Optional[str], status_text: str) -> tuple[Optional[str], Optional[str]]:
    """(fatal, warning) for a pool's health as `zpool list` printed it (None: not imported).

    ONLINE: neither. DEGRADED: a warning (it still serves every block, with less redundancy
    than it was built with). Anything else, or no pool, is fatal: the rollout stops there.
    Both quote `zpool status`."""
    said = _status_summary(status_text)
    if health is None:
        return (f"pool {pool!r} is not imported: zpool status says: {said}. The layer never imports or "
                f"creates a pool: import it (`zpool import {pool}`) and run `pulumi up` again", None)
    if health == "ONLINE":
        return None, None
    if health == "DEGRADED":
        return None, (f"pool {pool!r} is DEGRADED: it still serves, with less redundancy than it was "
                      f"built with; replace the failed device soon. zpool status says: {said}")
    return (f"pool {pool!r} is {health}: it cannot serve its datasets (more devices lost than its "
            f"redundancy allows, taken offline, or I/O suspended). zpool status says: {said}", None)


# ---- mounts ---------------------------------------------------------------------------------


_ZFS_FSTYPES = ("zfs", "fuse.zfs")
_NFS_FSTYPES = ("nfs", "nfs4")


def _seen(m: Mount) -> str:
    return f"{m.target} ({m.fstype} from {m.source})"


def judge_dataset(st: StorageLayer, duty: str, props: Optional[dict[str, tuple[str, str]]]) -> list[str]:
    """A store's dataset as `zfs get` printed it (parse_zfs_get's entry): it exists, is mounted
    at the declared mountpoint, can mount, and ZFS does not share it (`sharenfs=off`: the layer
    owns the export). `readonly` is judged for models only where ZFS reports it as set: a
    `temporary` value is the mount's (zfs-fuse), so the caller probes the mount with a write."""
    s = getattr(st, duty)
    if not props:
        return [f"dataset {s.dataset} ({duty}) does not exist (zfs get printed nothing for it)"]
    fails = []

    def value(prop: str) -> tuple[str, str]:
        return props.get(prop, ("(not printed)", "-"))

    for prop, want in (("mountpoint", s.mountpoint), ("mounted", "yes"), ("canmount", "on"),
                       ("sharenfs", "off")):
        got, source = value(prop)
        if got != want:
            fails.append(f"dataset {s.dataset} ({duty}) has {prop}={got} ({source}), expected {prop}={want}")
    ro, source = value("readonly")
    want = "on" if duty == "models" else "off"
    if ro != want and source != "temporary":
        fails.append(f"dataset {s.dataset} ({duty}) has readonly={ro} ({source}), expected readonly={want}")
    return fails


def judge_mounts(st: StorageLayer, duty: str, mount: Optional[Mount], kind: str) -> list[str]:
    """One store's mount as findmnt showed it; `kind`:

    - "server": `findmnt -T <mountpoint>` on the storage host must show the dataset itself as
      the source, at the mountpoint, as ZFS (`zfs`, or `fuse.zfs` from zfs-fuse); pair it with
      judge_dataset (`zfs get mounted`), since either alone is no proof;
    - "client": `findmnt -M <client_mount>` on a node must show the store over NFS (the FUSE
      test double's type for `fuse-libnfs`), mounted ro (models) or rw (data).
    Each failure names what findmnt saw."""
    s = getattr(st, duty)
    if kind == "server":
        return _judge_server_mount(s.dataset, s.mountpoint, mount)
    if kind == "client":
        return _judge_client_mount(st, duty, mount)
    raise ValueError(f"judge_mounts kind {kind!r}: expected 'server' or 'client'")


def _judge_server_mount(dataset: str, mountpoint: str, m: Optional[Mount]) -> list[str]:
    if m is None:
        return [f"{mountpoint} is not the mountpoint of {dataset}: findmnt -T shows nothing (the path "
                "does not exist, or findmnt failed)"]
    if m.target != mountpoint:
        where = ("the directory is on the root filesystem" if m.target == "/"
                 else f"the directory is on the filesystem mounted at {m.target}")
        return [f"{mountpoint} is not the mountpoint of {dataset}: findmnt -T shows {_seen(m)} — {where}, "
                "not the dataset"]
    if m.source != dataset:
        return [f"{mountpoint} is not the mountpoint of {dataset}: findmnt -T shows {_seen(m)} — another "
                "filesystem is mounted there"]
    if m.fstype not in _ZFS_FSTYPES:
        return [f"{mountpoint} is mounted from {dataset} as {m.fstype}, not as ZFS (zfs or fuse.zfs)"]
    return []


def _judge_client_mount(st: StorageLayer, duty: str, m: Optional[Mount]) -> list[str]:
    s = getattr(st, duty)
    where = s.client_mount
    if m is None:
        return [f"{where} is not mounted (findmnt -M shows nothing)"]
    fails = []
    if m.target != where:
        fails.append(f"{where} is not a mountpoint: findmnt shows {_seen(m)}")
    fstypes = (FUSE_FSTYPE,) if st.client == "fuse-libnfs" else _NFS_FSTYPES
    path = PSEUDO[duty] if st.client == "fuse-libnfs" else s.mountpoint
    if m.fstype not in fstypes or not m.source.endswith(f":{path}"):
        fails.append(f"{where} is {m.source} ({m.fstype}), expected <server>:{path} ({' or '.join(fstypes)})")
    mode = "ro" if duty == "models" else "rw"
    if mode not in m.options:
        fails.append(f"{where} is mounted {','.join(m.options) or 'without options'}, expected {mode}")
    return fails


# ---- kernel nfsd exports --------------------------------------------------------------------

_OCTAL = re.compile(r"\\([0-7]{3})")
_CLIENT = re.compile(r"^(.*?)\((.*)\)$")


def _unoctal(value: str) -> str:
    """The kernel and nfs-utils escape blanks and backslashes in paths as \\NNN (octal)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), value)


def _add_client(out: Exported, path: Optional[str], token: str) -> None:
    m = _CLIENT.match(token)
    if path is None or not m:
        return
    client = "*" if m.group(1) == "<world>" else _unoctal(m.group(1))
    out.setdefault(path, {}).setdefault(client, set()).update(o for o in m.group(2).split(",") if o)


def parse_exportfs_v(text: str) -> Exported:
    """`exportfs -v` -> {path: {client: {options}}}. A path longer than 14 characters puts its
    client on the next line; `<world>` (exported to everyone) is reported as `*`."""
    out: Exported = {}
    path: Optional[str] = None
    for token in text.split():
        if token.startswith("/") and "(" not in token:
            path = _unoctal(token)
        elif "(" in token:
            _add_client(out, path, token)
        else:
            path = None  # an error message's words: not exportfs's table
    return out


def parse_proc_nfsd_exports(text: str) -> Exported:
    """`/proc/fs/nfsd/exports` (the kernel's export cache; mountd fills it when a client asks)
    -> {path: {client: {flags}}}. The kernel knows nothing of `mp` (mountd applies it): an
    export refused for an unmounted path is simply not there."""
    out: Exported = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) == 2 and fields[0].startswith("/"):
            _add_client(out, _unoctal(fields[0]), fields[1])
    return out


def _is_world(client: str) -> bool:
    for name in client.split(","):  # mountd joins the names of every matching client entry
        name = name.strip()
        if name in ("*", "<world>", ""):
            return True
        try:
            if ipaddress.ip_network(name, strict=False).prefixlen == 0:
                return True
        except ValueError:
            pass
    return False


def _same_network(client: str, net: str) -> bool:
    try:
        return ipaddress.ip_network(client, strict=False) == ipaddress.ip_network(net, strict=False)
    except ValueError:
        return client == net


def judge_exports(st: StorageLayer, exported: Exported, *, require_mp: bool = True) -> list[str]:
    """Kernel nfsd: every store exported to exactly the stack's client network, models `ro`, data
    `rw`, root squashed, with `mp` (shown as `mountpoint`); nothing exported to everyone.
    `require_mp=False` for /proc/fs/nfsd/exports, which never shows `mp`."""
    net = str(st.clients)
    fails = []
    for duty in DUTIES:
        s = getattr(st, duty)
        clients = exported.get(s.mountpoint)
        if not clients:
            fails.append(f"{s.mountpoint} ({duty}) is not exported "
                         f"(exported: {', '.join(sorted(exported)) or 'nothing'})")
            continue
        mine = [c for c in clients if _same_network(c, net)]
        others = sorted(c for c in clients if c not in mine)
        if not mine:
            fails.append(f"{s.mountpoint} ({duty}) is not exported to {net}: it is exported to {', '.join(others)}")
        elif others:
            fails.append(f"{s.mountpoint} ({duty}) is also exported to {', '.join(others)}; only {net} may mount it")
        for c in mine:
            fails += _judge_options(duty, s.mountpoint, c, clients[c], require_mp)
    for path, clients in sorted(exported.items()):
        for c in sorted(clients):
            if _is_world(c):
                fails.append(f"{path} is exported to everyone ({c}): export only to {net}")
    return fails


def _judge_options(duty: str, path: str, client: str, opts: set[str], require_mp: bool) -> list[str]:
    seen = ",".join(sorted(opts)) or "no options"
    fails = []
    if duty == "models" and ("rw" in opts or "ro" not in opts):
        fails.append(f"{path} to {client} is not read-only (options: {seen}): the models store is exported ro")
    if duty == "data" and "rw" not in opts:
        fails.append(f"{path} to {client} is not read-write (options: {seen}): the data store is exported rw")
    if "no_root_squash" in opts:
        fails.append(f"{path} to {client} has no_root_squash (options: {seen}): root must be squashed")
    if require_mp and not any(o in ("mp", "mountpoint") or o.startswith(("mp=", "mountpoint="))
                              for o in opts):
        fails.append(f"{path} to {client} lacks mp (options: {seen}): nfsd would export the directory "
                     "even with the dataset unmounted")
    return fails


# ---- nfs-ganesha ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GaneshaExport:
    export_id: int
    path: str
    pseudo: str
    clients: tuple[str, ...]


_DBUS_STRING = re.compile(r'string\s+"([^"]*)"')
_DBUS_CLIENT = re.compile(r'struct\s*\{\s*string\s+"([^"]*)"')


def parse_ganesha_export(text: str) -> Optional[GaneshaExport]:
    """`dbus-send --print-reply ... ExportMgr DisplayExport uint16:<id>` -> the export's id, path,
    pseudo path and client names; None when ganesha has no such export (`Error ...: lookup_export
    failed with Export id not found`) or did not answer (any other error: the caller quotes it).
    Whitespace and line breaks anywhere are fine. The clients' other struct members (types and
    flags) are not interpreted."""
    start = text.find("method return")
    if start < 0:
        return None
    reply = text[start:]
    array = re.search(r"array\s*\[", reply)
    head, clients = (reply[:array.start()], reply[array.end():]) if array else (reply, "")
    eid = re.search(r"\buint16\s+(\d+)", head)
    strings = _DBUS_STRING.findall(head)
    if eid is None or len(strings) < 2:
        return None
    return GaneshaExport(int(eid.group(1)), strings[0], strings[1], tuple(_DBUS_CLIENT.findall(clients)))


def judge_ganesha_export(st: StorageLayer, duty: str, export: Optional[GaneshaExport]) -> list[str]:
    """ganesha's own view of one store's export: there, the declared path as its pseudo path,
    to exactly the stack's client network. DisplayExport does not show access types: ro/rw is
    proved by the clients' write probes."""
    s = getattr(st, duty)
    eid, pseudo, net = EXPORT_IDS[duty], PSEUDO[duty], str(st.clients)
    if export is None:
        return [f"ganesha does not export {s.mountpoint} ({duty}, export {eid})"]
    fails = []
    if (export.export_id, export.path, export.pseudo) != (eid, s.mountpoint, pseudo):
        fails.append(f"ganesha export {export.export_id} is {export.path} as {export.pseudo}, expected "
                     f"export {eid}: {s.mountpoint} as {pseudo}")
    if len(export.clients) != 1 or not _same_network(export.clients[0], net):
        fails.append(f"ganesha exports {export.path} to {', '.join(export.clients) or 'nobody'}, expected "
                     f"{net} only")
    return fails
