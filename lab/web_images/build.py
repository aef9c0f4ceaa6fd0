"""Build Slurm-web's agent and gateway images (the real Slurm-web 6.0.0, from the vendored source
tarball) as OCI archives, cached machine-wide.

No Dockerfile and no container engine: each image is one layer made of
- the files of a Debian package dependency closure from the lab's apt repository (`dpkg-deb -x`,
  from its Packages index, without the packages an image never runs: dpkg, debconf, ...), less
  documentation: Python 3.11, and what would otherwise be compiled wheels (python3-ldap; RacksDB's
  PyGObject and pycairo: python3-gi, python3-gi-cairo, python3-cairo, Pango);
- Slurm-web's pinned wheels (requirements.txt, hashes checked by pip; both images hold both
  components' dependencies: upstream's one `slurm-web` command imports them all) and Slurm-web
  itself from the tarball, installed with pip into /usr/local/lib/python3.11/dist-packages;
- upstream's configuration definitions (conf/vendor: /usr/share/slurm-web/conf and templates),
  a `/usr/bin/slurm-web` launcher (what pip's console script would run), and for the gateway the
  frontend built from its lock file (sources.py) in /usr/share/slurm-web/frontend.
Owners are root except /etc/slurm-web (uid/gid 999, mode 0700: the seed's trap; the web layer
mounts its configuration elsewhere). Everything is written deterministically (sorted, fixed
mtimes, gzip without a timestamp, no bytecode), so the same inputs give the same digests.

Cached under `<cache>/lab/web-images-<key>/` (`agent.oci.tar`, `gateway.oci.tar`, `build.json`)
with a `.ok` marker. Each image has its own key (its packages' SHA-256s, the tarball's, its
requirements, the frontend's for the gateway, and these files; in its label and its tag
`6.0.0-<key>`), so a change to one image leaves the other's digest as it was.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from .. import repo as lab_repo
from ..common import ROOT, LabError, cache_dir, flock, log, remove_tree, run, sha16
from . import sources

HERE = Path(__file__).resolve().parent
SLURM_WEB_VERSION = sources.VERSION
EPOCH = 1704067200  # 2024-01-01T00:00:00Z: every file's mtime and the images' creation time
CREATED = "2024-01-01T00:00:00Z"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AGENT_UID = 999
SITE = "usr/local/lib/python3.11/dist-packages"
SHARE = "usr/share/slurm-web"
#: never in an image: package tooling, init, and what the Python packages' Depends drag in unused
EXCLUDE = {"dpkg", "debconf", "debconf-2.0", "iproute2", "init-system-helpers", "lsb-base",
           "sysvinit-utils", "readline-common", "perl-base", "tzdata", "libc-bin", "base-files"}
#: trees dropped from every image (documentation, translations, charset converters)
PRUNE = ["usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
         "usr/share/lintian", "usr/share/i18n", "usr/lib/x86_64-linux-gnu/gconv",
         "etc/init.d", "etc/logrotate.d", "lib/systemd", "usr/lib/systemd", "var/log",
         "usr/lib/python3.11/ensurepip", "usr/lib/python3.11/idlelib", "usr/lib/python3.11/tkinter",
         "usr/lib/python3.11/turtledemo", "usr/lib/python3.11/pydoc_data", "usr/lib/python3.11/lib2to3"]
#: what pip's console script for `slurm-web` runs (pyproject's [project.scripts])
LAUNCHER = "#!/usr/bin/python3 -I\nfrom slurmweb.exec.main import SlurmwebExecMain\nSlurmwebExecMain.run()\n"
PY_ENV = [PATH_ENV, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"]

IMAGES = {
    "agent": {
        "repository": "gpu-fleet/slurm-web-agent",
        "roots": ["python3-minimal", "libpython3.11-stdlib", "python3-ldap", "python3-gi", "python3-gi-cairo",
                  "python3-cairo", "gir1.2-pango-1.0"],
        "user": f"{AGENT_UID}:{AGENT_UID}",
        "port": 5012,
    },
    "gateway": {
        "repository": "gpu-fleet/slurm-web-gateway",
        "roots": ["python3-minimal", "libpython3.11-stdlib", "python3-ldap", "python3-gi", "python3-gi-cairo",
                  "python3-cairo", "gir1.2-pango-1.0"],
        "user": f"{AGENT_UID}:{AGENT_UID}",
        "port": 5011,
    },
}

PASSWD = ["root:x:0:0:root:/root:/usr/sbin/nologin",
          f"slurm-web:x:{AGENT_UID}:{AGENT_UID}:Slurm-web:/etc/slurm-web:/usr/sbin/nologin",
          "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"]
GROUP = ["root:x:0:", f"slurm-web:x:{AGENT_UID}:", "nogroup:x:65534:"]


def entrypoint(comp: str) -> list[str]:
    return ["/usr/bin/slurm-web", comp]


def default_cmd(comp: str) -> list[str]:
    """Upstream's own defaults; the web layer passes its rendered file instead."""
    return ["--conf-defs", f"/{SHARE}/conf/{comp}.yml", "--conf", f"/etc/slurm-web/{comp}.ini"]


# --- the repository's index and a dependency closure (pure) -------------------------------------

def parse_index(text: str) -> dict[str, dict]:
    """Packages index -> {name: stanza}; a name listed twice keeps its later stanza."""
    pkgs: dict[str, dict] = {}
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if line[:1].isspace() and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, val = line.partition(":")
                fields[key] = val.strip()
        if "Package" in fields:
            pkgs[fields["Package"]] = fields
    return pkgs


def _alternatives(field: str) -> list[list[str]]:
    """'a (>= 1) | b, c:any' -> [['a', 'b'], ['c']] (versions and arch qualifiers dropped)."""
    out = []
    for clause in filter(None, (c.strip() for c in field.split(","))):
        out.append([alt.split("(")[0].split(":")[0].strip() for alt in clause.split("|")])
    return out


def closure(index: dict[str, dict], roots: list[str], exclude: set[str] = EXCLUDE) -> list[str]:
    """Names of the packages `roots` need (Pre-Depends and Depends, recursively; the first
    alternative the index has, by name or Provides), less `exclude`."""
    provides: dict[str, str] = {}
    for name, st in sorted(index.items()):
        for alt in _alternatives(st.get("Provides", "")):
            provides.setdefault(alt[0], name)
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name in exclude:
            continue
        if name not in index:
            raise LabError(f"web images: {name} is not in the lab repository (lab/packages.txt)")
        seen.add(name)
        st = index[name]
        for clause in _alternatives(st.get("Pre-Depends", "")) + _alternatives(st.get("Depends", "")):
            if any(a in exclude for a in clause):
                continue
            pick = next((a for a in clause if a in index), None) or next(
                (provides[a] for a in clause if a in provides), None)
            if pick is None:
                raise LabError(f"web images: {name} needs {' | '.join(clause)}, not in the lab repository")
            todo.append(pick)
    return sorted(seen)


# --- key -----------------------------------------------------------------------------------

def plan(repo_dir: Path, src: Path) -> dict:
    """What each image is made of and its key, and the cache key, from the repository's index and
    the unpacked tarball (`src`)."""
    index = parse_index((repo_dir / "Packages").read_text())
    this = hashlib.sha256((HERE / "build.py").read_bytes() + (HERE / "sources.py").read_bytes()).hexdigest()
    images, keys = {}, {}
    for comp, spec in IMAGES.items():
        names = closure(index, spec["roots"])
        images[comp] = [(n, index[n]["Version"], index[n]["SHA256"], index[n]["Filename"]) for n in names]
        ui = sources.frontend_key(src / "frontend") if comp == "gateway" else None
        keys[comp] = sha16("web-image-v2", lab_repo.arch(), sources.TARBALL_SHA256, comp, images[comp],
                           sources.requirements_hash(), ui, this)
    return {"key": sha16("web-images-v3", keys), "keys": keys, "packages": images}


# --- rootfs and OCI archive ----------------------------------------------------------------------

def _python_tree(comp: str, src: Path, root: Path) -> None:
    """The component's wheels and Slurm-web from the tarball, in the image's site directory;
    no bytecode (not reproducible byte for byte), no scripts (the launcher runs it), no record of
    where the build ran."""
    target = root / SITE
    pip = [str(ROOT / ".venv/bin/pip"), "install", "-q", "--no-deps", "--no-index", "--no-compile",
           "--no-warn-script-location", "--target", str(target)]
    wheels = sources.wheels()
    run([*pip, *map(str, wheels)], timeout=600)
    with tempfile.TemporaryDirectory(dir=root.parent) as td:  # the build writes into its tree
        tree = Path(td) / "slurm-web"
        tree.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            (tree / name).write_bytes((src / name).read_bytes())
        shutil.copytree(src / "slurmweb", tree / "slurmweb")
        # built in pip's isolated environment with the pinned setuptools, from the same wheels
        run([*pip, "--find-links", str(wheels[0].parent), str(tree)], timeout=600)
    remove_tree(target / "bin")
    for p in target.glob("*.dist-info/direct_url.json"):  # names the build's temp dir
        p.unlink()
        record = p.with_name("RECORD")
        record.write_text("".join(line for line in record.read_text().splitlines(keepends=True)
                                  if not line.startswith(f"{p.parent.name}/direct_url.json,")))
    for p in sorted(target.rglob("__pycache__")):
        remove_tree(p)


def _rootfs(comp: str, debs: list[Path], src: Path, root: Path) -> None:
    for deb in debs:
        run(["dpkg-deb", "-x", str(deb), str(root)])
    for rel in PRUNE:
        p = root / rel
        if p.is_symlink() or p.is_file():
            p.unlink()
        elif p.is_dir():
            remove_tree(p)
    for d, mode in (("tmp", 0o1777), ("run", 0o755), ("etc", 0o755), ("var/tmp", 0o1777)):
        (root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(root / d, mode)
    (root / "etc/passwd").write_text("\n".join(PASSWD) + "\n")
    (root / "etc/group").write_text("\n".join(GROUP) + "\n")
    (root / "etc/os-release").write_text(
        f'PRETTY_NAME="gpu-fleet Slurm-web {SLURM_WEB_VERSION} {comp} (Debian 12 packages)"\nID=gpu-fleet\n')
    if not (root / "usr/bin/python3").is_symlink() and not (root / "usr/bin/python3").exists():
        raise LabError(f"web images: the {comp}'s root has no /usr/bin/python3")
    _python_tree(comp, src, root)
    share = root / SHARE
    (share / "conf").mkdir(parents=True)
    (share / "templates").mkdir()
    for f in (src / "conf" / "vendor").iterdir():
        if f.is_file():
            (share / "conf" / f.name).write_bytes(f.read_bytes())
    for f in (src / "conf" / "vendor" / "templates").iterdir():
        (share / "templates" / f.name).write_bytes(f.read_bytes())
    if comp == "gateway":
        dist = sources.frontend(src)
        for f in sorted(dist.rglob("*")):
            dest = share / "frontend" / f.relative_to(dist)
            if f.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(f.read_bytes())
    launcher = root / "usr/bin/slurm-web"
    launcher.write_text(LAUNCHER)
    os.chmod(launcher, 0o755)
    (root / "etc/slurm-web").mkdir(mode=0o700, exist_ok=True)
    os.chmod(root / "etc/slurm-web", 0o700)


def _owner(comp: str, name: str) -> tuple[int, int]:
    if (name == "etc/slurm-web" or name.startswith("etc/slurm-web/")):
        return AGENT_UID, AGENT_UID
    return 0, 0


def layer_tar(comp: str, root: Path, out) -> None:
    """The root as one deterministic tar (sorted names, fixed mtimes, numeric owners)."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for n in sorted(dirnames + filenames):
                paths.append(Path(dirpath) / n)
        for p in sorted(paths, key=lambda x: x.relative_to(root).as_posix()):
            name = p.relative_to(root).as_posix()
            _add(tar, p, name, *_owner(comp, name))


def _add(tar: tarfile.TarFile, path: Path, name: str, uid: int = 0, gid: int = 0) -> None:
    """One entry, the same whenever the file is: numeric owner, no names, a fixed mtime."""
    ti = tar.gettarinfo(str(path), arcname=name)
    ti.uid, ti.gid, ti.uname, ti.gname, ti.mtime = uid, gid, "", "", EPOCH
    if ti.isreg():
        with open(path, "rb") as f:
            tar.addfile(ti, f)
    else:
        tar.addfile(ti)


def _blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / digest.split(":")[1]).write_bytes(data)
    return digest, len(data)


def oci_archive(comp: str, root: Path, dest: Path, key: str) -> dict:
    spec = IMAGES[comp]
    raw = io.BytesIO()
    layer_tar(comp, root, raw)
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, filename="", compresslevel=6) as g:
        g.write(raw.getvalue())
    with tempfile.TemporaryDirectory(dir=dest.parent) as td:
        lay = Path(td)
        blobs = lay / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        layer_digest, layer_size = _blob(blobs, gz.getvalue())
        labels = {
            "org.opencontainers.image.title": f"slurm-web-{comp}",
            "org.opencontainers.image.version": SLURM_WEB_VERSION,
            "org.opencontainers.image.description":
                f"Slurm-web {SLURM_WEB_VERSION} {comp}, built by gpu-fleet from the upstream tag's source",
            "org.opencontainers.image.source": "https://github.com/rackslab/Slurm-web",
            "org.opencontainers.image.licenses": "MIT",
            "io.gpu-fleet.lab.build-key": key,
        }
        config = {
            "created": CREATED, "architecture": "amd64", "os": "linux",
            "config": {"User": spec["user"], "Env": PY_ENV, "Entrypoint": entrypoint(comp), "Cmd": default_cmd(comp),
                       "StopSignal": "SIGINT",
                       "WorkingDir": "/", "ExposedPorts": {f"{spec['port']}/tcp": {}}, "Labels": labels},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": CREATED, "created_by": "lab/web_images/build.py"}],
        }
        cfg_digest, cfg_size = _blob(blobs, json.dumps(config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": cfg_digest, "size": cfg_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": layer_digest, "size": layer_size}],
        }
        man_digest, man_size = _blob(blobs, json.dumps(manifest, sort_keys=True).encode())
        (lay / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        (lay / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": man_digest,
             "size": man_size, "annotations": {"org.opencontainers.image.ref.name": tag(key)}}]}))
        with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
            for p in sorted(lay.rglob("*")):
                _add(tar, p, p.relative_to(lay).as_posix())
    return {"manifest_digest": man_digest, "layer_digest": layer_digest, "diff_id": diff_id,
            "layer_bytes": layer_size, "rootfs_bytes": len(raw.getvalue())}


def tag(key: str) -> str:
    return f"{SLURM_WEB_VERSION}-{key}"


# --- the cached build ---------------------------------------------------------------------------

def ensure(repo_dir: Path | None = None) -> dict:
    """The cached build for the current inputs (built if missing): {"key", "dir", "images":
    {comp: {"archive", "repository", "tag", "manifest_digest", ...}}}."""
    repo_dir = repo_dir or lab_repo.ensure_repo()
    src = sources.source_tree()
    p = plan(repo_dir, src)
    key = p["key"]
    cache = cache_dir()
    out = cache / f"web-images-{key}"
    ok = cache / f"web-images-{key}.ok"
    if not (ok.exists() and (out / "build.json").exists()):
        with flock(cache / ".web-images.lock", "web images"):
            if not (ok.exists() and (out / "build.json").exists()):
                _build(p, repo_dir, src, out)
                ok.write_text(f"{key}\n")
    info = json.loads((out / "build.json").read_text())
    for comp, img in info["images"].items():
        img["archive"] = str(out / f"{comp}.oci.tar")
    info["dir"] = str(out)
    return info


def _build(p: dict, repo_dir: Path, src: Path, out: Path) -> None:
    start = time.monotonic()
    key = p["key"]
    tmp = out.with_name(f".{out.name}.tmp")
    remove_tree(tmp)
    tmp.mkdir(parents=True)
    info = {"key": key, "images": {}}
    for comp, pkgs in p["packages"].items():
        t0 = time.monotonic()
        root = tmp / f"{comp}-root"
        root.mkdir()
        _rootfs(comp, [repo_dir / fn for _, _, _, fn in pkgs], src, root)
        res = oci_archive(comp, root, tmp / f"{comp}.oci.tar", p["keys"][comp])
        remove_tree(root)
        res.update(repository=IMAGES[comp]["repository"], tag=tag(p["keys"][comp]),
                   packages=[f"{n}={v}" for n, v, _, _ in pkgs])
        info["images"][comp] = res
        log(f"  built the {comp} image: {len(pkgs)} packages, {res['rootfs_bytes'] / 2**20:.1f} MiB "
            f"({res['layer_bytes'] / 2**20:.1f} MiB compressed) in {time.monotonic() - t0:.1f} s")
    (tmp / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    remove_tree(out)
    os.rename(tmp, out)
    log(f"web images {key} built in {time.monotonic() - start:.1f} s (cached in {out})")
