#!/usr/bin/env python3
"""TEST DOUBLE of the Slurm-web agent (the lab's stand-in for Slurm-web 7.0.0, which no
registry here serves): a read-only JSON view of the cluster from slurmrestd.

Python 3 standard library only. It asks slurmrestd over its Unix socket (GET only, with
X-SLURM-USER-NAME / X-SLURM-USER-TOKEN), discovering the API version: the first of
v0.0.41 .. v0.0.36 whose /slurm/<v>/ping answers 200.

Environment:
  SLURMRESTD_SOCKET  slurmrestd's socket (default /run/slurmrestd/slurmrestd.socket)
  TOKEN_FILE         the bare JWT, re-read on every request (default /run/secrets/slurm-web/token)
  TOKEN_USER         the user the token is for (default slurmweb)
  LISTEN_PORT        TCP port, bound on 0.0.0.0 (default 8081)

HTTP: GET /api/nodes, /api/partitions, /api/jobs, /healthz; another method -> 405, an unknown
path -> 404, slurmrestd failing (401 on an expired token, no socket) -> 502 {"error": ...}.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SOCKET = os.environ.get("SLURMRESTD_SOCKET", "/run/slurmrestd/slurmrestd.socket")
TOKEN_FILE = os.environ.get("TOKEN_FILE", "/run/secrets/slurm-web/token")
TOKEN_USER = os.environ.get("TOKEN_USER", "slurmweb")
PORT = int(os.environ.get("LISTEN_PORT", "8081"))
VERSIONS = ["v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38", "v0.0.37", "v0.0.36"]
TIMEOUT = 10.0


class Upstream(Exception):
    """slurmrestd could not be asked or said no."""


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=TIMEOUT)
        self.path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(TIMEOUT)
        s.connect(self.path)
        self.sock = s


def token() -> str:
    try:
        with open(TOKEN_FILE) as f:
            return f.read().strip()
    except OSError as e:
        raise Upstream(f"cannot read the token file {TOKEN_FILE}: {e.strerror}") from None


def restd_get(path: str) -> tuple[int, bytes]:
    conn = UnixConnection(SOCKET)
    try:
        conn.request("GET", path, headers={"X-SLURM-USER-NAME": TOKEN_USER,
                                           "X-SLURM-USER-TOKEN": token(), "Accept": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    except OSError as e:
        raise Upstream(f"slurmrestd at {SOCKET}: {e}") from None
    finally:
        conn.close()


_version: str | None = None


def api_version() -> str:
    global _version
    if _version:
        return _version
    seen = []
    for v in VERSIONS:
        status, _ = restd_get(f"/slurm/{v}/ping")
        if status == 200:
            _version = v
            return v
        if status in (401, 403):
            raise Upstream(f"slurmrestd refused the token (HTTP {status})")
        seen.append(f"{v}: {status}")
    raise Upstream("slurmrestd serves none of " + ", ".join(seen))


def fetch(what: str) -> dict:
    global _version
    v = api_version()
    status, body = restd_get(f"/slurm/{v}/{what}")
    if status == 404:  # slurmrestd restarted with other plugins: discover again next time
        _version = None
    if status != 200:
        raise Upstream(f"slurmrestd GET /slurm/{v}/{what}: HTTP {status}: {body[:200].decode(errors='replace')}")
    try:
        return json.loads(body)
    except ValueError:
        raise Upstream(f"slurmrestd GET /slurm/{v}/{what}: not JSON") from None


def words(x) -> list[str]:
    if isinstance(x, str):
        return [x] if x else []
    return [str(w) for w in x or []]


def state_of(base, flags=()) -> str:
    """Slurm's state words, lower-case, joined as Slurm joins them ("idle+drain")."""
    parts = [w.lower() for w in words(base) + words(flags)]
    return "+".join(dict.fromkeys(parts)) or "unknown"


def nodes() -> dict:
    out = []
    for n in fetch("nodes").get("nodes", []):
        out.append({"name": n.get("name"), "state": state_of(n.get("state"), n.get("state_flags")),
                    "gres": n.get("gres", ""), "cpus": n.get("cpus"),
                    "partitions": list(n.get("partitions") or [])})
    return {"nodes": out}


def partitions() -> dict:
    out = []
    for p in fetch("partitions").get("partitions", []):
        st = p.get("state")
        if isinstance(st, dict):  # v0.0.40+: {"state": ["UP"]}
            st = st.get("state")
        nodes_ = p.get("nodes")
        if isinstance(nodes_, dict):  # v0.0.40+: {"configured": "node[1-3]"}
            nodes_ = nodes_.get("configured")
        out.append({"name": p.get("name"), "nodes": nodes_ or "", "state": state_of(st)})
    return {"partitions": out}


def jobs() -> dict:
    out = []
    for j in fetch("jobs").get("jobs", []):
        out.append({"id": j.get("job_id"), "name": j.get("name"), "user": j.get("user_name"),
                    "state": state_of(j.get("job_state")), "nodes": j.get("nodes", ""),
                    "partition": j.get("partition")})
    return {"jobs": out}


ROUTES = {"/api/nodes": nodes, "/api/partitions": partitions, "/api/jobs": jobs,
          "/healthz": lambda: {"status": "ok"}}


class Handler(BaseHTTPRequestHandler):
    server_version = "slurm-web-agent-standin"
    sys_version = ""

    def reply(self, code: int, doc: dict, extra: dict | None = None) -> None:
        body = (json.dumps(doc) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        route = ROUTES.get(self.path.split("?", 1)[0])
        if route is None:
            self.reply(404, {"error": f"no such path: {self.path}"})
            return
        try:
            self.reply(200, route())
        except Upstream as e:
            self.reply(502, {"error": str(e)})

    def not_allowed(self) -> None:
        self.reply(405, {"error": f"method {self.command} not allowed (read-only)"}, {"Allow": "GET, HEAD"})

    do_HEAD = do_GET

    def __getattr__(self, name: str):
        if name.startswith("do_"):  # every other method, known or not: 405 (not http.server's 501)
            return self.not_allowed
        raise AttributeError(name)

    def log_message(self, fmt: str, *args) -> None:
        sys.stderr.write("agent: %s %s\n" % (self.address_string(), fmt % args))


def main() -> None:
    # PID 1 in a container: SIGTERM has no default action there, so `podman stop` would wait
    # out its timeout and SIGKILL
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    httpd = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    httpd.daemon_threads = True
    print(f"slurm-web agent (lab stand-in) on :{PORT}, slurmrestd {SOCKET}, token {TOKEN_FILE}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
