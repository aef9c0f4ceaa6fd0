"""TEST DOUBLE of the Hugging Face Hub's download API, for the real `huggingface_hub` client.

The internet hub cannot be reached from here or from the lab, so this serves repos from disk
with the routes, headers and error codes that `snapshot_download`, `hf_hub_download` and
`HfApi.model_info` / `repo_info` / `list_repo_tree` (huggingface_hub 2.4.0) read:

    GET  /api/models/<org>/<name>[/revision/<rev>][?blobs=true]   repo info (sha, siblings)
    GET  /api/models/<org>/<name>/tree/<rev>[/<dir>][?recursive=]  tree listing (oid, size, lfs)
    HEAD /<org>/<name>/resolve/<rev>/<path>                        X-Repo-Commit, ETag, size
    GET  /<org>/<name>/resolve/<rev>/<path>   [Range: bytes=a-b]   the bytes (200 or 206)

Never any Xet header or `xetHash`, so the client takes the plain HTTP path. Stdlib only: it
also runs as `python -m tests.doubles.hub` with a host's bare python3.11.

On disk: `<root>/<org>/<name>/<commit40>/<files>` and `<root>/<org>/<name>/refs/<branch>`
(a file holding a commit). A file ending `.safetensors`, or of at least 1 MiB, is LFS: its
ETag is its sha256 and its git blob is the LFS pointer, as on the hub; any other file's ETag is
its git blob id.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional
from urllib.parse import parse_qs, unquote, urlsplit

LFS_MIN_SIZE = 1024 * 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_CHUNK = 1024 * 1024


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob with these bytes (what the hub calls a file's `oid`)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The Git LFS pointer that stands in the repo's git tree for an LFS file."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def is_lfs(relpath: str, size: int) -> bool:
    return relpath.endswith(".safetensors") or size >= LFS_MIN_SIZE


@dataclass(frozen=True)
class FileMeta:
    """What the hub knows of one file: `blob_id` is the git blob (the pointer's, for LFS)."""

    size: int
    blob_id: str
    sha256: Optional[str]  # LFS files only
    pointer_size: Optional[int]

    @property
    def etag(self) -> str:
        return self.sha256 or self.blob_id


def file_meta(path: Path, relpath: str) -> FileMeta:
    """Digest one file in a single read (sha256 for LFS files, the git blob id otherwise)."""
    size = path.stat().st_size
    if is_lfs(relpath, size):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(8 * _CHUNK):
                h.update(block)
        pointer = lfs_pointer(h.hexdigest(), size)
        return FileMeta(size, git_blob_id(pointer), h.hexdigest(), len(pointer))
    return FileMeta(size, git_blob_id(path.read_bytes()), None, None)


class DigestCache:
    """Digests computed once per (path, size, mtime), so a HEAD costs one stat, not a hash."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[tuple, FileMeta] = {}
        self._busy: dict[tuple, threading.Lock] = {}

    def get(self, path: Path, relpath: str) -> FileMeta:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._done:
                return self._done[key]
            busy = self._busy.setdefault(key, threading.Lock())
        with busy:  # one thread hashes a file; the others wait for its result
            with self._lock:
                if key in self._done:
                    return self._done[key]
            meta = file_meta(path, relpath)
            with self._lock:
                self._done[key] = meta
                self._busy.pop(key, None)
            return meta


def git_tree_ids(files: dict[str, FileMeta]) -> dict[str, str]:
    """Git tree object ids of every directory ("" is the root), as the hub lists folders."""
    children: dict[str, dict[str, tuple[str, str]]] = {"": {}}
    for rel in files:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            parent, d = "/".join(parts[: i - 1]), "/".join(parts[:i])
            children.setdefault(d, {})
            children.setdefault(parent, {})[parts[i - 1]] = ("40000", d)
        children.setdefault("/".join(parts[:-1]), {})[parts[-1]] = ("100644", rel)
    ids: dict[str, str] = {}

    def tree_id(d: str) -> str:
        body = b""
        # git orders entries by name, a directory's name compared as if it ended in "/"
        for name, (mode, full) in sorted(children[d].items(),
                                         key=lambda kv: kv[0] + ("/" if kv[1][0] == "40000" else "")):
            oid = tree_id(full) if mode == "40000" else files[full].blob_id
            body += f"{mode} {name}".encode() + b"\0" + bytes.fromhex(oid)
        ids[d] = hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()
        return ids[d]

    tree_id("")
    return ids


class HubError(Exception):
    """An error answer in the hub's shape: status, X-Error-Code and X-Error-Message."""

    def __init__(self, status: int, code: Optional[str], message: str, commit: Optional[str] = None):
        super().__init__(message)
        self.status, self.code, self.message, self.commit = status, code, message, commit


class Repos:
    """The repos under `root`, read from disk on every request (a test may add commits live)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.digests = DigestCache()

    def repo_dir(self, org: str, name: str, authenticated: bool) -> Path:
        d = self.root / org / name
        if not (_NAME.fullmatch(org) and _NAME.fullmatch(name) and d.is_dir()):
            # the hub answers 401 to an anonymous caller (a private repo looks the same), 404 otherwise
            raise HubError(404 if authenticated else 401, "RepoNotFound", "Repository not found")
        return d

    def resolve(self, repo: Path, rev: str) -> str:
        if _COMMIT.fullmatch(rev) and (repo / rev).is_dir():
            return rev
        ref = repo / "refs" / rev
        if _BRANCH.fullmatch(rev) and ref.is_file():
            commit = ref.read_text().strip()
            if _COMMIT.fullmatch(commit) and (repo / commit).is_dir():
                return commit
        raise HubError(404, "RevisionNotFound", f"Invalid rev id: {rev}")

    def files(self, repo: Path, commit: str) -> dict[str, FileMeta]:
        base = repo / commit
        out: dict[str, FileMeta] = {}
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != ".git")
            for fn in sorted(filenames):
                p = Path(dirpath) / fn
                rel = p.relative_to(base).as_posix()
                out[rel] = self.digests.get(p, rel)
        return out

    def file(self, repo: Path, commit: str, relpath: str) -> tuple[Path, FileMeta]:
        base = (repo / commit).resolve()
        p = (base / relpath).resolve()
        if base not in p.parents or not p.is_file() or ".git" in Path(relpath).parts:
            raise HubError(404, "EntryNotFound", f"{relpath} does not exist on \"{commit}\"", commit)
        return p, self.digests.get(p, relpath)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler, double: "HubDouble"):
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        self.double = double
        super().__init__(addr, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    server: _Server  # the one that made this handler

    def version_string(self) -> str:
        return "hub-double"

    def log_message(self, format, *args):  # the JSON request log replaces stderr lines
        pass

    def setup(self):
        super().setup()
        self.server.double._track(self.connection, True)

    def finish(self):
        self.server.double._track(self.connection, False)
        super().finish()

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    # -- one request --------------------------------------------------------------------------

    def _serve(self, head: bool) -> None:
        d: HubDouble = self.server.double
        self._sent, self._status, self._complete = 0, 0, True
        start = time.time()
        try:
            try:
                self._route(d, head)
            except HubError as e:
                self._error(e, head)
        except OSError:  # the client went away (or was killed) mid-answer
            self._complete = False
            self.close_connection = True
        except Exception as e:  # a bug in the double: say so to the client, not only to stderr
            self._complete = False
            self.close_connection = True
            if not self._status:
                self._error(HubError(500, None, f"hub double: {type(e).__name__}: {e}"), head)
        finally:
            d._record({
                "method": self.command, "path": self.path, "range": self.headers.get("Range"),
                "status": self._status, "bytes_sent": self._sent, "complete": self._complete,
                "start": start, "end": time.time(), "user_agent": self.headers.get("User-Agent"),
            })

    def _route(self, d: "HubDouble", head: bool) -> None:
        url = urlsplit(self.path)
        parts = url.path.split("/")[1:]
        authed = self._check_token(d)
        if len(parts) >= 4 and parts[0] == "api" and parts[1] == "models":
            if head:
                raise HubError(405, None, "Method not allowed")
            repo = d.repos.repo_dir(parts[2], parts[3], authed)
            query = parse_qs(url.query)
            rest = parts[4:]
            if not rest or (rest[0] == "revision" and len(rest) == 2):
                rev = unquote(rest[1]) if rest else "main"
                return self._json(self._repo_info(d, repo, parts[2], parts[3], rev, query))
            if rest[0] == "tree" and len(rest) >= 2:
                sub = unquote("/".join(rest[2:])).strip("/")
                return self._json(self._tree(d, repo, unquote(rest[1]), sub, query))
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo = d.repos.repo_dir(parts[0], parts[1], authed)
            commit = d.repos.resolve(repo, unquote(parts[3]))
            relpath = unquote("/".join(parts[4:]))
            path, meta = d.repos.file(repo, commit, relpath)
            return self._file(d, path, meta, commit, head)
        raise HubError(404, None, "Not Found")

    def _check_token(self, d: "HubDouble") -> bool:
        auth = self.headers.get("Authorization")
        if d.token is None:
            return auth is not None
        if auth is None:
            raise HubError(401, "RepoNotFound", "Repository not found")
        if not (auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].encode(), d.token.encode())):
            raise HubError(401, None, "Invalid credentials in Authorization header")
        return True

    @staticmethod
    def _repo_info(d, repo: Path, org: str, name: str, rev: str, query: dict) -> dict:
        commit = d.repos.resolve(repo, rev)
        files = d.repos.files(repo, commit)
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for rel, m in files.items():
            s: dict = {"rfilename": rel}
            if blobs:
                s.update(size=m.size, blobId=m.blob_id)
                if m.sha256:
                    s["lfs"] = {"sha256": m.sha256, "size": m.size, "pointerSize": m.pointer_size}
            siblings.append(s)
        when = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime((repo / commit).stat().st_mtime))
        info = {"_id": commit[:24], "id": f"{org}/{name}", "modelId": f"{org}/{name}", "author": org,
                "sha": commit, "lastModified": when, "createdAt": when, "private": d.token is not None,
                "gated": False, "disabled": False, "tags": [], "siblings": siblings}
        if blobs:
            info["usedStorage"] = sum(m.size for m in files.values())
        return info

    @staticmethod
    def _tree(d, repo: Path, rev: str, sub: str, query: dict) -> list:
        commit = d.repos.resolve(repo, rev)
        files = d.repos.files(repo, commit)
        trees = git_tree_ids(files)
        if sub and sub not in trees:
            raise HubError(404, "EntryNotFound", f"{sub} does not exist on \"{commit}\"", commit)
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = sub + "/" if sub else ""

        def wanted(p: str) -> bool:
            return p.startswith(prefix) and (recursive or "/" not in p[len(prefix):])

        out: list = [{"type": "directory", "oid": tid, "size": 0, "path": p}
                     for p, tid in sorted(trees.items()) if p and wanted(p)]
        for rel, m in files.items():
            if wanted(rel):
                e: dict = {"type": "file", "oid": m.blob_id, "size": m.size, "path": rel}
                if m.sha256:
                    e["lfs"] = {"oid": m.sha256, "size": m.size, "pointerSize": m.pointer_size}
                out.append(e)
        return out

    # -- answers ------------------------------------------------------------------------------

    def _json(self, body_obj) -> None:
        body = json.dumps(body_obj).encode()
        self._start(200, {"Content-Type": "application/json; charset=utf-8",
                          "Content-Length": str(len(body))})
        self.wfile.write(body)
        self._sent = len(body)

    def _error(self, e: HubError, head: bool) -> None:
        body = json.dumps({"error": e.message}).encode()
        headers = {"Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(body)),
                   "X-Error-Message": e.message}
        if e.code:
            headers["X-Error-Code"] = e.code
        if e.commit:
            headers["X-Repo-Commit"] = e.commit
        self._start(e.status, headers)
        if not head:
            self.wfile.write(body)
            self._sent = len(body)

    def _start(self, status: int, headers: dict) -> None:
        self._status = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def _file(self, d: "HubDouble", path: Path, meta: FileMeta, commit: str, head: bool) -> None:
        size = meta.size
        headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                   "ETag": f'"{meta.etag}"', "X-Repo-Commit": commit,
                   "Last-Modified": formatdate(path.stat().st_mtime, usegmt=True)}
        if meta.sha256:
            headers.update({"X-Linked-Etag": f'"{meta.sha256}"', "X-Linked-Size": str(size)})
        start, end, status = 0, size - 1, 200
        rng = None if head else self.headers.get("Range")
        if rng is not None:
            m = _RANGE.fullmatch(rng.strip())
            if m and (m.group(1) or m.group(2)):  # a single range; anything else gets the whole file
                if m.group(1):
                    start = int(m.group(1))
                    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                else:
                    start = max(size - int(m.group(2)), 0)
                if start >= size or start > end:
                    headers.update({"Content-Range": f"bytes */{size}", "Content-Length": "0"})
                    self._start(416, headers)
                    return
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        count = end - start + 1 if size else 0
        headers["Content-Length"] = str(count)
        self._start(status, headers)
        if head or count == 0:
            return
        limit = count
        if d.cut_after is not None and start == 0 and count > d.cut_after and d._first_get(path):
            limit = d.cut_after
        with open(path, "rb") as f:
            self._send_body(f, start, limit, d.rate)
        if limit < count:  # the injected fault: the connection drops mid-body
            self._complete = False
            self.close_connection = True

    def _send_body(self, f, offset: int, count: int, rate: Optional[float]) -> None:
        t0 = time.monotonic()
        while count > 0:
            n = min(count, _CHUNK if rate else count)
            sent = self.connection.sendfile(f, offset, n)
            if not sent:
                raise ConnectionResetError("client went away")
            offset, count, self._sent = offset + sent, count - sent, self._sent + sent
            if rate:
                ahead = self._sent / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)


class HubDouble:
    """The hub double in this process: `with HubDouble(root) as hub: snapshot_download(...,
    endpoint=hub.url)`. `token` makes every request need `Authorization: Bearer <token>`;
    `log` appends one JSON line per request (also kept in `.requests`); `rate_mbps` caps each
    response at that many MB/s (10^6 bytes); `cut_after` drops the connection after that many
    body bytes of the first whole-file GET of each file larger than it (a network fault the
    client resumes from with a Range)."""

    def __init__(self, root, host: str = "127.0.0.1", port: int = 0, log=None, token: Optional[str] = None,
                 rate_mbps: Optional[float] = None, cut_after: Optional[int] = None):
        self.repos = Repos(Path(root))
        self.host, self.port = host, port
        self.log_path = Path(log) if log else None
        self.token = token
        self.rate = rate_mbps * 1e6 if rate_mbps else None
        self.cut_after = cut_after
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._cut_done: set[str] = set()
        self._conns: set[socket.socket] = set()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> "HubDouble":
        self._server = _Server((self.host, self.port), _Handler, self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="hub-double",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and drop open connections (a download in flight ends short)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        assert self._thread is not None  # started with the server
        self._thread.join()
        self._server = None

    def __enter__(self) -> "HubDouble":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _track(self, conn: socket.socket, open_: bool) -> None:
        with self._lock:
            (self._conns.add if open_ else self._conns.discard)(conn)

    def _first_get(self, path: Path) -> bool:
        with self._lock:
            if str(path) in self._cut_done:
                return False
            self._cut_done.add(str(path))
            return True

    def _record(self, entry: dict) -> None:
        with self._lock:
            self.requests.append(entry)
            if self.log_path:
                with open(self.log_path, "a") as f:
                    f.write(json.dumps(entry) + "\n")
