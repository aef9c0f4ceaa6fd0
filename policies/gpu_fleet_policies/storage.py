"""Storage: exports only from the stack's datasets, the model store read-only everywhere.

The seed's storage failure: an export of a directory that was not the dataset (the pool not
imported, an empty folder on the root disk). Checked on the storage layer's resources:

- Files that configure an NFS server: kernel nfsd (`/etc/exports`, `/etc/exports.d/*.exports`,
  exports(5) syntax) and nfs-ganesha (`/etc/ganesha/*.conf`, its block syntax, read by a
  small tolerant parser below). Every export's path must be the mountpoint of a dataset the
  stack declares (`gpu-fleet:storage`); the models export is read-only; root is squashed;
  no export is open to everyone (`*`, a `/0` network, or ganesha's export-level access,
  which applies to every client no CLIENT block names).
- The layer's ZfsDatasets resource: `sharenfs=off` on every dataset, so ZFS never shares
  a dataset behind the layer's back.
- SystemdUnit `.mount` units: the models store (mounted at the stack's models client mount,
  or mounting the models export) is mounted `ro`.

The declared datasets come from the stack config the engine sends (stackconfig.py); without
it, an export or an NFS mount unit cannot be checked and is refused (fail closed). The
constants mirror components/layers/storage/render.py and StorageLayer's defaults (the pack
does not import the program; tests/policy/test_storage_policies.py holds them equal).
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from dataclasses import dataclass, field
from typing import Optional

from . import props as P
from . import stackconfig
from .common import Res, file_content, resource
from .exposure import _unit_lines, _unit_texts

ZFS_DATASETS = "pulumi-python:dynamic/storage:ZfsDatasets"
EXPORTS_FILE = "/etc/exports.d/gpu-fleet.exports"
GANESHA_CONF = "/etc/ganesha/ganesha.conf"
#: ganesha's pseudo path of the models export (render.PSEUDO["models"])
MODELS_PSEUDO = "/models"
#: StorageLayer's defaults for a store the stack config leaves out
DEFAULT_STORES = {
    "models": {"dataset": "ai/models", "mountpoint": "/srv/ai/models", "client_mount": "/mnt/models"},
    "data": {"dataset": "ai/data", "mountpoint": "/srv/ai/data", "client_mount": "/mnt/data"},
}
NO_CONFIG = ("the engine did not send the stack's configuration, so it cannot be checked against "
             "the datasets gpu-fleet:storage declares; refused until it can be")
_NFS_MOUNT_TYPES = ("nfs", "nfs4", "fuse.nfsfuse")


# ---- what the stack declares ----------------------------------------------------------------

def declared_stores() -> Optional[dict[str, dict[str, str]]]:
    """duty -> {dataset, mountpoint, client_mount} as the stack declares them ({} while the
    storage layer is off: it declares no dataset); None if the engine sent no stack config."""
    cfg = stackconfig.get()
    if cfg is None:
        return None
    section = cfg.get("storage")
    if not isinstance(section, dict) or section.get("enabled") is not True:
        return {}
    out = {}
    for duty, defaults in DEFAULT_STORES.items():
        spec = section.get(duty)
        spec = spec if isinstance(spec, dict) else {}
        store = {k: str(spec.get(k) or v) for k, v in defaults.items()}
        out[duty] = {k: v if k == "dataset" else posixpath.normpath(v) for k, v in store.items()}
    return out


def _declared_text(stores: dict[str, dict[str, str]]) -> str:
    if not stores:
        return "gpu-fleet:storage is not enabled, so it declares none"
    return "gpu-fleet:storage: " + ", ".join(
        f"{duty} {s['dataset']} at {s['mountpoint']}" for duty, s in stores.items())


def is_everyone(client: str) -> bool:
    """`*` (or no client at all), or a network of prefix length 0 (0.0.0.0/0, ::/0, x/0)."""
    c = client.strip()
    if c in ("", "*", "<world>") or c.endswith("/0"):
        return True
    try:
        return ipaddress.ip_network(c, strict=False).prefixlen == 0
    except ValueError:
        return False


# ---- one model for both servers' exports ----------------------------------------------------

@dataclass
class Access:
    """What one client gets from one export."""

    client: str          # as written; "*" for everyone
    writable: bool
    root_squashed: bool
    shown: str           # the options as the file says them, for messages
    granted: bool = True  # False: ganesha's Access_Type = None (no access at all)
    note: str = ""       # how the client came about, for messages

    @property
    def named(self) -> str:
        return self.client + self.note


@dataclass
class Export:
    path: Optional[str]
    where: str           # "line 3", "EXPORT block 1"
    access: list[Access] = field(default_factory=list)


# exports(5) ---------------------------------------------------------------------------------

_EXPORTS_TOKEN = re.compile(r'"[^"]*"|[^\s"]+')
_OCTAL = re.compile(r"\\([0-7]{3})")


def is_exports_file(path: Optional[str]) -> bool:
    return path == "/etc/exports" or bool(
        path and path.startswith("/etc/exports.d/") and path.endswith(".exports"))


def _exports_lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line): comments dropped, backslash continuations joined."""
    out, pending, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0]
        if not pending:
            start = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.strip():
            out.append((start, line))
    if pending.strip():
        out.append((start, pending))
    return out


def _kernel_access(client: str, opts: list[str]) -> Access:
    """exports(5) defaults: ro, root_squash; the last of each pair wins."""
    writable, squashed = False, True
    for o in opts:
        if o in ("ro", "rw"):
            writable = o == "rw"
        elif o in ("root_squash", "no_root_squash"):
            squashed = o == "root_squash"
        elif o == "anonuid=0":
            squashed = False  # root squashed to uid 0 is root
    note = "" if client else " (no client named: exports(5) makes that everyone)"
    return Access(client or "*", writable, squashed, ",".join(opts) or "no options", note=note)


def parse_exports(text: str) -> list[Export]:
    """exports(5): `path [-defaults] client(options) client ...`; a line without a client, or a
    `(options)` standing alone, exports to everyone."""
    out = []
    for n, line in _exports_lines(text):
        tokens = _EXPORTS_TOKEN.findall(line)
        path = _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), tokens[0].strip('"'))
        exp = Export(posixpath.normpath(path) if path.startswith("/") else path, f"line {n}")
        defaults: list[str] = []
        clients = tokens[1:]
        for tok in clients:
            if tok.startswith("-"):
                defaults += [o for o in tok[1:].split(",") if o]
                continue
            name, _, rest = tok.partition("(")
            own = [o for o in rest.rstrip(")").split(",") if o]
            exp.access.append(_kernel_access(name, defaults + own))
        if not exp.access:
            exp.access.append(_kernel_access("", defaults))
        out.append(exp)
    return out


# nfs-ganesha ---------------------------------------------------------------------------------

_GANESHA_TOKEN = re.compile(r'#[^\n]*|"(?:[^"\\]|\\.)*"|\'[^\']*\'|[{};=]|[^\s{};=#"\']+')
_WRITABLE = ("rw", "mdonly")
_NO_SQUASH = ("no_root_squash", "none", "noidsquash")


@dataclass
class Block:
    name: str
    params: dict[str, list[str]] = field(default_factory=dict)   # lower-case key -> values
    blocks: list["Block"] = field(default_factory=list)

    def get(self, key: str) -> Optional[str]:
        values = self.params.get(key.lower())
        return values[-1] if values else None

    def children(self, name: str) -> list["Block"]:
        return [b for b in self.blocks if b.name.lower() == name.lower()]


def parse_ganesha(text: str) -> Block:
    """ganesha's config as nested blocks: `NAME { key = value; SUB { ... } }`, case-insensitive
    names, `#` comments, quoted values; forgiving of a missing `;` before `}`."""
    root = Block("")
    stack = [root]
    words: list[str] = []
    key: Optional[str] = None
    value: list[str] = []

    def finish() -> None:
        nonlocal key, value
        if key is not None:
            stack[-1].params.setdefault(key, []).append(" ".join(value).strip())
        key, value = None, []

    for m in _GANESHA_TOKEN.finditer(text):
        tok = m.group(0)
        if tok.startswith("#"):
            continue
        if tok in (";", "}"):
            finish()
            words = []
            if tok == "}" and len(stack) > 1:
                stack.pop()
        elif tok == "{":
            finish()
            block = Block(words[-1] if words else "")
            stack[-1].blocks.append(block)
            stack.append(block)
            words = []
        elif tok == "=":
            finish()
            key = words[-1].lower() if words else ""
            words = []
        elif key is not None:
            value.append(tok.strip("\"'") if tok[0] in "\"'" else tok)
        else:
            words.append(tok)
    finish()
    return root


def _list(value: Optional[str]) -> list[str]:
    return [v.strip().strip("\"'") for v in (value or "").split(",") if v.strip()]


def _setting(key: str, *blocks: Block, default: str) -> str:
    """The first of `blocks` that sets `key`, else ganesha's default."""
    for b in blocks:
        if (value := b.get(key)) is not None:
            return value
    return default


def _ganesha_access(client: str, *blocks: Block, note: str = "") -> Access:
    access = _setting("Access_Type", *blocks, default="None")
    squash = _setting("Squash", *blocks, default="root_squash")
    anon = _setting("Anonymous_Uid", *blocks, default="-2")
    squashed = squash.lower() not in _NO_SQUASH and anon.strip() != "0"
    return Access(client, access.lower() in _WRITABLE, squashed,
                  f"Access_Type = {access}; Squash = {squash}; Anonymous_Uid = {anon}",
                  granted=access.lower() != "none", note=note)


def ganesha_exports(root: Block) -> list[Export]:
    """Each EXPORT block with what each client gets. A CLIENT block's unset options come from
    its EXPORT, then EXPORT_DEFAULTS, then ganesha's defaults (Access_Type None, root squashed).
    The export-level Access_Type applies to every client no CLIENT block names: anything but
    None there is an export to everyone."""
    defaults = Block("EXPORT_DEFAULTS")
    for d in root.children("EXPORT_DEFAULTS"):
        for k, v in d.params.items():
            defaults.params.setdefault(k, []).extend(v)
        defaults.blocks += d.children("CLIENT")
    out = []
    for i, exp in enumerate(root.children("EXPORT"), 1):
        path = exp.get("Path")
        e = Export(posixpath.normpath(path) if path and path.startswith("/") else path, f"EXPORT block {i}")
        for c in exp.children("CLIENT") + defaults.blocks:
            names = [n for v in c.params.get("clients", []) for n in _list(v)]
            e.access += [_ganesha_access(name, c, exp, defaults) for name in names]
        everyone = _ganesha_access("*", exp, defaults,
                                   note=" (every client no CLIENT block names, by the EXPORT's Access_Type)")
        if everyone.granted:
            e.access.append(everyone)
        out.append(e)
    return out


# ---- the File validators ---------------------------------------------------------------------

def _export_file(args) -> Optional[tuple[Res, str, list[Export]]]:
    """(the File, how messages name it, its exports) for an NFS server config File."""
    res = resource(args, P.FILE)
    if res is None:
        return None
    path = P.path_of(res.props)
    kernel = is_exports_file(path)
    if not (kernel or (path and path.startswith("/etc/ganesha/") and path.endswith(".conf"))):
        return None
    content = file_content(res)
    if content is None:  # missing or unknown during preview: checked again with real values
        return None
    exports = parse_exports(content) if kernel else ganesha_exports(parse_ganesha(content))
    return res, res.describe("File", path), exports


def validate_export_paths(args, report_violation) -> None:
    """Every export's path is the mountpoint of a dataset the stack declares."""
    found = _export_file(args)
    if found is None:
        return
    _, who, exports = found
    if not exports:
        return
    stores = declared_stores()
    if stores is None:
        paths = ", ".join(sorted({e.path or "(no Path)" for e in exports}))
        report_violation(f"{who} exports {paths}, but {NO_CONFIG}.", None)
        return
    mountpoints = {s["mountpoint"] for s in stores.values()}
    for e in exports:
        if e.path is None:
            report_violation(f"{who} has an export without a Path ({e.where}); give it the mountpoint of "
                             f"a dataset the stack declares ({_declared_text(stores)}).", None)
        elif e.path not in mountpoints:
            report_violation(
                f"{who} exports {e.path} ({e.where}), which is not the mountpoint of a dataset the stack "
                f"declares ({_declared_text(stores)}); export only those mountpoints, so a directory "
                "that is not a dataset is never served.", None)


def validate_models_export_readonly(args, report_violation) -> None:
    """The models export is read-only to every client."""
    found = _export_file(args)
    if found is None:
        return
    _, who, exports = found
    stores = declared_stores()
    if stores is None:
        if exports:
            report_violation(f"{who} exports NFS paths; which of them is the models store {NO_CONFIG}.", None)
        return
    models = stores.get("models", {}).get("mountpoint")
    for _, e, a in _granted(args):
        if e.path == models and a.writable:
            report_violation(
                f"{who} exports the models store {e.path} writable to {a.named} ({a.shown}); export it "
                "read-only: `ro` in the client's options (kernel), Access_Type = RO (ganesha).", None)


def _granted(args):
    """(how messages name the File, export, access) for every client an export grants access."""
    found = _export_file(args)
    if found is None:
        return
    _, who, exports = found
    for e in exports:
        for a in e.access:
            if a.granted:
                yield who, e, a


def validate_export_root_squash(args, report_violation) -> None:
    """No export lets a client's root act as root on the store."""
    for who, e, a in _granted(args):
        if not a.root_squashed:
            report_violation(
                f"{who} exports {e.path} to {a.named} without squashing root ({a.shown}); remove "
                "no_root_squash (ganesha: Squash = root_squash) and keep the anonymous uid nobody's, "
                "so root on a node is nobody on the store.", None)


def validate_export_clients(args, report_violation) -> None:
    """No export is open to everyone: no `*`, no `/0` network, no export without a client."""
    for who, e, a in _granted(args):
        if is_everyone(a.client):
            report_violation(
                f"{who} exports {e.path} to everyone ({a.named}); name the stack's client network "
                "(gpu-fleet:storage.clients) instead (ganesha: Access_Type = None at the EXPORT level "
                "and a CLIENT block for that network).", None)


# ---- ZFS ------------------------------------------------------------------------------------

def validate_sharenfs_off(args, report_violation) -> None:
    """Every dataset of the layer's ZfsDatasets resource sets sharenfs=off."""
    res = resource(args, ZFS_DATASETS)
    if res is None:
        return
    datasets = res.get("datasets")
    if P.is_unknown(datasets) or not isinstance(datasets, list):
        return
    who = res.describe("ZfsDatasets")
    for ds in datasets:
        if P.contains_unknown(ds) or not isinstance(ds, dict):
            continue
        name = P.text(ds.get("name")) or "(unnamed)"
        props = P.reveal(ds.get("properties"))
        value = props.get("sharenfs") if isinstance(props, dict) else None
        if value != "off":
            have = f"sets sharenfs={value}" if value is not None else "does not set sharenfs (it inherits it)"
            report_violation(f"{who} {have} on {name}; set sharenfs=off: the storage layer owns the "
                             "export, and ZFS sharing the dataset too would export it behind its back.", None)


# ---- client mounts --------------------------------------------------------------------------

_UNIT_HEX = re.compile(r"\\x([0-9a-fA-F]{2})")


def path_of_mount_unit(name: str) -> str:
    """`mnt-my\\x2ddata.mount` -> `/mnt/my-data` (systemd's path unescaping)."""
    stem = name[:-len(".mount")] if name.endswith(".mount") else name
    if stem == "-":
        return "/"
    parts = [_UNIT_HEX.sub(lambda m: chr(int(m.group(1), 16)), p) for p in stem.split("-")]
    return "/" + "/".join(parts)


def _last(lines: list[tuple[str, str, str]], key: str) -> Optional[str]:
    values = [v for s, k, v in lines if s == "Mount" and k == key]
    return values[-1] if values else None


def _mounts_models(where: str, what: str, models: dict[str, str]) -> bool:
    export = what.rpartition(":")[2] if ":" in what else ""
    return where == models["client_mount"] or (bool(export) and posixpath.normpath(export) in (
        models["mountpoint"], MODELS_PSEUDO))


def validate_models_mount_readonly(args, report_violation) -> None:
    """A mount unit of the models store (at the stack's models client mount, or of its export)
    mounts it ro."""
    res = resource(args, P.SYSTEMD_UNIT)
    if res is None:
        return
    name = P.text(res.get("name")) or P.text(res.get("unit"))
    if not name or not name.endswith(".mount"):
        return
    texts = _unit_texts(res)
    if texts is None:
        return
    lines = [line for t in texts for line in _unit_lines(t)]
    where = posixpath.normpath(_last(lines, "Where") or path_of_mount_unit(name))
    what, fstype = _last(lines, "What") or "", (_last(lines, "Type") or "").lower()
    options = [o.strip() for o in (_last(lines, "Options") or "").split(",") if o.strip()]
    who = res.describe("SystemdUnit", name)
    stores = declared_stores()
    if stores is None:
        if fstype in _NFS_MOUNT_TYPES:
            report_violation(f"{who} mounts {what or 'an NFS export'} at {where}; whether it is the models "
                             f"store {NO_CONFIG}.", None)
        return
    models = stores.get("models")
    if not models or not _mounts_models(where, what, models):
        return
    modes = [o for o in options if o in ("ro", "rw")]
    if not modes or modes[-1] != "ro":
        shown = f"Options={','.join(options)}" if options else "no Options= (mounts default to rw)"
        report_violation(f"{who} mounts the models store ({what or '?'}) at {where} with {shown}; put ro "
                         "in Options= (and no rw after it): the model store is read-only on every node.",
                         None)
