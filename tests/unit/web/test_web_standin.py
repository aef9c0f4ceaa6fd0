"""The lab's stand-in Slurm-web agent (lab/web_images/agent.py, a TEST DOUBLE of Slurm-web 7.0.0)
against a fake slurmrestd 22.05 on a Unix socket: the HTTP contract in the agent's docstring (nodes
with gres and state, partitions, jobs; 405 on anything but GET; 502 when slurmrestd says 401; the
token file re-read on every request; API version discovery), and the image build's pure parts.

The fake answers with the shapes of Debian's slurmrestd 22.05.8, openapi/v0.0.38 (field names
from the OpenAPI document compiled into openapi_v0_0_38.so: nodes[].name/state/state_flags/gres/
cpus/partitions, partitions[].name/nodes/state, jobs[].job_id/name/user_name/job_state/nodes/
partition); it serves v0.0.36..v0.0.38 only, as 22.05 does."""

from __future__ import annotations

import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from lab.web_images import build

AGENT = Path(__file__).resolve().parents[3] / "lab" / "web_images" / "agent.py"
GOOD, EXPIRED = "eyJ.good.token", "eyJ.expired.token"
META = {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
        "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}


def _node(name: str, state: str, flags: list[str], alloc: int) -> dict:
    return {"architecture": "x86_64", "burstbuffer_network_address": "", "boards": 1, "boot_time": 1733050000,
            "cores": 2, "cpu_binding": 0, "cpu_load": 3, "free_memory": 20000, "cpus": 2, "features": "",
            "active_features": "", "gres": "gpu:v100:8", "gres_drained": "N/A",
            "gres_used": f"gpu:v100:{alloc}(IDX:0-{alloc - 1})" if alloc else "gpu:v100:0(IDX:N/A)",
            "mcs_label": "", "name": name, "next_state_after_reboot": "invalid",
            "next_state_after_reboot_flags": [], "address": name, "hostname": name, "state": state,
            "state_flags": flags, "operating_system": "Linux 6.1.0", "owner": None, "partitions": ["v100"],
            "port": 6818, "real_memory": 3000, "reason": "maintenance" if flags else "",
            "reason_changed_at": 0, "reason_set_by_user": None, "slurmd_start_time": 1733050001,
            "sockets": 1, "threads": 1, "temporary_disk": 0, "weight": 1, "tres": "cpu=2,mem=3000M,billing=2,gres/gpu=8",
            "tres_used": None, "tres_weighted": 0.0, "slurmd_version": "22.05.8", "alloc_cpus": alloc,
            "idle_cpus": 2 - alloc, "alloc_memory": 0}


NODES = {"meta": META, "errors": [], "nodes": [
    _node("node1", "idle", [], 0), _node("node2", "mixed", [], 1), _node("node3", "idle", ["DRAIN"], 0)]}
PARTITIONS = {"meta": META, "errors": [], "partitions": [{
    "flags": ["default"], "preemption_mode": ["disabled"], "allowed_allocation_nodes": "",
    "allowed_accounts": "", "allowed_groups": "", "allowed_qos": "", "alternative": "", "billing_weights": "",
    "default_memory_per_cpu": 100, "default_time_limit": None, "denied_accounts": "", "denied_qos": "",
    "preemption_grace_time": 0, "maximum_cpus_per_node": -1, "maximum_memory_per_node": 0,
    "maximum_nodes_per_job": -1, "max_time_limit": -1, "min_nodes_per_job": 1, "name": "v100",
    "nodes": "node[1-3]", "over_time_limit": None, "priority_job_factor": 1, "priority_tier": 1, "qos": "",
    "state": "UP", "total_cpus": 6, "total_nodes": 3, "tres": "cpu=6,mem=9000M,node=3,billing=6",
    "maximum_memory_per_cpu": None, "default_memory_per_node": None}]}
JOBS = {"meta": META, "errors": [], "jobs": [
    {"account": "", "job_id": 41, "job_state": "COMPLETED", "name": "canary", "nodes": "node1",
     "partition": "v100", "user_id": 0, "user_name": "root", "group_id": 0, "cpus": 1, "node_count": 1,
     "tres_per_node": "gres:gpu:1", "submit_time": 1733050100, "state_reason": "None"},
    {"account": "", "job_id": 42, "job_state": "RUNNING", "name": "train", "nodes": "node2",
     "partition": "v100", "user_id": 1000, "user_name": "alice", "group_id": 1000, "cpus": 1,
     "node_count": 1, "tres_per_node": "gres:gpu:1", "submit_time": 1733050200, "state_reason": "None"}]}
SERVED = ("v0.0.36", "v0.0.37", "v0.0.38")


class FakeRestd(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str):
        self.seen: list[tuple[str, str, str, str]] = []  # method, path, user, token
        self.lock = threading.Lock()
        super().__init__(path, FakeHandler)


class FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeRestd

    def _send(self, code: int, doc: dict | bytes) -> None:
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if not isinstance(doc, bytes) else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _any(self) -> None:
        with self.server.lock:
            self.server.seen.append((self.command, self.path, self.headers.get("X-SLURM-USER-NAME", ""),
                                     self.headers.get("X-SLURM-USER-TOKEN", "")))
        parts = self.path.strip("/").split("/")  # slurm, v0.0.38, nodes
        if len(parts) != 3 or parts[0] != "slurm" or parts[1] not in SERVED:
            self._send(404, b"Unable to find requested URL")
            return
        if self.headers.get("X-SLURM-USER-TOKEN") != GOOD:
            self._send(401, b"Authentication failure")
            return
        docs = {"ping": {"meta": META, "errors": [], "pings": [
                    {"hostname": "ctl", "ping": "UP", "status": 0, "mode": "primary"}]},
                "nodes": NODES, "partitions": PARTITIONS, "jobs": JOBS}
        if self.command != "GET" or parts[2] not in docs:
            self._send(405 if self.command != "GET" else 404, {"meta": META, "errors": [{"error": "no"}]})
            return
        self._send(200, docs[parts[2]])

    do_GET = do_POST = do_DELETE = do_PUT = _any

    def log_message(self, *args) -> None:  # AF_UNIX: no client address to print
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def standin(tmp_path):
    sock = str(tmp_path / "slurmrestd.socket")
    restd = FakeRestd(sock)
    threading.Thread(target=restd.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text(GOOD + "\n")
    port = _free_port()
    env = {**os.environ, "SLURMRESTD_SOCKET": sock, "TOKEN_FILE": str(token), "TOKEN_USER": "slurmweb",
           "LISTEN_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-I", str(AGENT)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while True:
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1).read()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"agent did not start: {proc.stdout.read().decode()}")
            time.sleep(0.05)
    try:
        yield {"base": base, "restd": restd, "token": token, "proc": proc, "sock": sock}
    finally:
        proc.kill()
        proc.wait()
        restd.shutdown()
        restd.server_close()


def call(base: str, path: str, method: str = "GET") -> tuple[int, dict]:
    req = urllib.request.Request(base + path, method=method, data=b"{}" if method in ("POST", "PUT") else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_nodes_gres_state_cpus_partitions(standin):
    code, doc = call(standin["base"], "/api/nodes")
    assert code == 200
    assert doc == {"nodes": [
        {"name": "node1", "state": "idle", "gres": "gpu:v100:8", "cpus": 2, "partitions": ["v100"]},
        {"name": "node2", "state": "mixed", "gres": "gpu:v100:8", "cpus": 2, "partitions": ["v100"]},
        {"name": "node3", "state": "idle+drain", "gres": "gpu:v100:8", "cpus": 2, "partitions": ["v100"]},
    ]}


def test_partitions_and_jobs(standin):
    assert call(standin["base"], "/api/partitions") == (200, {"partitions": [
        {"name": "v100", "nodes": "node[1-3]", "state": "up"}]})
    assert call(standin["base"], "/api/jobs") == (200, {"jobs": [
        {"id": 41, "name": "canary", "user": "root", "state": "completed", "nodes": "node1", "partition": "v100"},
        {"id": 42, "name": "train", "user": "alice", "state": "running", "nodes": "node2", "partition": "v100"}]})


def test_discovers_the_api_version_and_asks_with_get_and_the_token(standin):
    call(standin["base"], "/api/nodes")
    call(standin["base"], "/api/jobs")
    seen = standin["restd"].seen
    assert [p for _, p, _, _ in seen[:4]] == ["/slurm/v0.0.41/ping", "/slurm/v0.0.40/ping",
                                              "/slurm/v0.0.39/ping", "/slurm/v0.0.38/ping"]
    assert [p for _, p, _, _ in seen[4:]] == ["/slurm/v0.0.38/nodes", "/slurm/v0.0.38/jobs"]  # found once
    assert {(m, u, t) for m, _, u, t in seen} == {("GET", "slurmweb", GOOD)}


def test_only_get(standin):
    for method in ("POST", "DELETE", "PUT", "PATCH"):
        code, doc = call(standin["base"], "/api/nodes", method)
        assert code == 405 and "error" in doc, (method, code, doc)
    assert call(standin["base"], "/api/nope")[0] == 404
    assert call(standin["base"], "/healthz") == (200, {"status": "ok"})
    assert all(m == "GET" for m, *_ in standin["restd"].seen)
    assert not any(p.endswith(("/nodes", "/jobs")) for _, p, *_ in standin["restd"].seen)


def test_expired_token_is_502_and_a_renewed_token_file_is_read_without_restart(standin):
    assert call(standin["base"], "/api/nodes")[0] == 200
    standin["token"].write_text(EXPIRED)
    code, doc = call(standin["base"], "/api/nodes")
    assert code == 502 and "401" in doc["error"], doc
    standin["token"].write_text(GOOD)
    code, doc = call(standin["base"], "/api/partitions")
    assert code == 200 and doc["partitions"][0]["name"] == "v100"
    assert standin["proc"].poll() is None
    assert [t for *_, t in standin["restd"].seen][-2:] == [EXPIRED, GOOD]


def test_expired_token_before_discovery_and_no_socket_are_502(standin):
    standin["token"].write_text(EXPIRED)
    code, doc = call(standin["base"], "/api/jobs")
    assert code == 502 and "401" in doc["error"]
    standin["token"].unlink()
    code, doc = call(standin["base"], "/api/jobs")
    assert code == 502 and "token file" in doc["error"]
    standin["token"].write_text(GOOD)
    os.unlink(standin["sock"])
    code, doc = call(standin["base"], "/api/nodes")
    assert code == 502 and "slurmrestd" in doc["error"]


# --- the image build's pure parts --------------------------------------------------------------

INDEX = """\
Package: app
Version: 1.0
Pre-Depends: libc6 (>= 2.34)
Depends: libssl3 (>= 3.0.0), debconf (>= 0.5) | debconf-2.0, mail-transport-agent, iproute2

Package: libc6
Version: 2.36
Depends: libgcc-s1

Package: libgcc-s1
Version: 12.2

Package: libssl3
Version: 3.0.22
Depends: libc6 (>= 2.34)

Package: exim4
Version: 4.96
Provides: mail-transport-agent
Depends: libc6
"""


def test_closure_follows_depends_and_provides_and_skips_the_excluded():
    index = build.parse_index(INDEX)
    assert index["app"]["Pre-Depends"] == "libc6 (>= 2.34)"
    assert build.closure(index, ["app"]) == ["app", "exim4", "libc6", "libgcc-s1", "libssl3"]
    with pytest.raises(Exception, match="not in the lab repository"):
        build.closure(index, ["nginx-light"])


def test_the_agent_image_tree_has_the_trap_owner(tmp_path):
    import io
    import tarfile

    (tmp_path / "etc" / "slurm-web").mkdir(parents=True, mode=0o700)
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0::/:/bin/false\n")
    buf = io.BytesIO()
    build.layer_tar("agent", tmp_path, buf)
    again = io.BytesIO()
    build.layer_tar("agent", tmp_path, again)
    assert buf.getvalue() == again.getvalue()  # deterministic
    members = {m.name: m for m in tarfile.open(fileobj=io.BytesIO(buf.getvalue())).getmembers()}
    assert (members["etc/slurm-web"].uid, members["etc/slurm-web"].gid) == (999, 999)
    assert members["etc/slurm-web"].mode & 0o777 == 0o700
    assert (members["etc/passwd"].uid, members["etc/passwd"].mtime) == (0, build.EPOCH)
