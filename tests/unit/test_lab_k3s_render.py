"""The lab's K3s (lab/k3s.py): what it writes on the nodes, and how it tells a Ready node."""

from __future__ import annotations

import calendar
import hashlib
import io
import json
import tarfile
import time

from lab import k3s
from lab.hosts import Host


def test_units_are_what_the_k3s_installer_writes():
    for role, unit in (("server", "k3s"), ("agent", "k3s-agent")):
        text = k3s.render_unit(role)
        for line in ("KillMode=process", "Delegate=yes", "Restart=always", "WantedBy=multi-user.target",
                     f"EnvironmentFile=-/etc/systemd/system/{unit}.service.env"):
            assert line in text.splitlines(), (role, line)
        assert text.rstrip().endswith(f"/usr/local/bin/k3s \\\n    {role} \\")


def test_agent_env_names_the_server_and_the_token():
    env = k3s.render_env("agent", "10.0.0.5", "K10abc::server:def")
    assert env.splitlines() == ["K3S_URL='https://10.0.0.5:6443'", "K3S_TOKEN='K10abc::server:def'"]
    assert "K3S_TOKEN" not in k3s.render_env("server", "10.0.0.5", "K10abc::server:def")


def test_token_carries_the_ca_hash():
    tok = k3s.make_token(b"CA PEM")
    prefix, _, secret = tok.partition("::server:")
    assert prefix == "K10" + hashlib.sha256(b"CA PEM").hexdigest() and len(secret) == 32
    assert k3s.make_token(b"CA PEM") != tok


def test_server_bundle_modes_and_links():
    pki = {f: f.encode() for f in ("server-ca.crt", "server-ca.key", "client-ca.crt", "client-ca.key",
                                    "serving-kube-apiserver.crt", "serving-kube-apiserver.key",
                                    "client-admin.crt", "client-admin.key", "service.key", "service.current.key")}
    h = Host("node2", "10.213.57.22", ("node",))
    with tarfile.open(fileobj=io.BytesIO(k3s.server_bundle("KEY", h, pki, "K10x::server:y"))) as tar:
        members = {m.name: m for m in tar.getmembers()}
    d = "var/lib/rancher/k3s"
    for secret in (f"{d}/server/token", f"{d}/server/cred/passwd", "etc/rancher/k3s/k3s.yaml",
                   f"{d}/server/tls/server-ca.key", "etc/systemd/system/k3s.service.env"):
        assert members[secret].mode == 0o600, secret
    assert members[f"{d}/server/node-token"].linkname == f"/{d}/server/token"
    assert members[f"{d}/data/KEY/bin/containerd-shim-runc-v2"].mode == 0o755
    assert "etc/systemd/system/postgresql@15-main.service.d/10-k3s.conf" in members


def _nodes(*conds):
    return json.dumps({"items": [{"metadata": {"name": n}, "status": {"capacity": {"nvidia.com/gpu": "8"},
                                                                     "conditions": c}} for n, c in conds]})


def test_ready_needs_true_and_a_fresh_heartbeat():
    now = calendar.timegm(time.strptime("2026-01-01T00:01:00Z", "%Y-%m-%dT%H:%M:%SZ"))
    ready = {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:50Z"}
    stale = {**ready, "lastHeartbeatTime": "2026-01-01T00:00:10Z"}
    res = k3s.readiness(_nodes(("a", [ready]), ("b", [stale]), ("c", [{**ready, "status": "False"}]), ("d", [])), now)
    assert res["a"] == {"condition": "True", "heartbeat_age_s": 10.0, "ready": True, "gpus": "8"}
    assert res["b"]["ready"] is False and res["b"]["heartbeat_age_s"] == 50.0
    assert res["c"]["ready"] is False and res["d"]["condition"] == "Unknown"
    assert k3s.readiness("not json", now) == {}


def test_only_nodes_get_the_k3s_parts_bound():
    from lab import nspawn
    from lab.common import k3s_cache_dir
    from lab.hosts import lab_hosts

    bind = f"--bind-ro={k3s_cache_dir()}:{nspawn.K3S_MOUNT_POINT}"
    for h in lab_hosts(2):
        assert (bind in nspawn.nspawn_argv(h, k3s.ROOT / "repo")) == ("node" in h.roles), h.name
