"""The lab's K3s (issue 18, lab/k3s.py): `python -m lab k3s install` puts a real control plane
(kine on SQLite + kube-apiserver v1.34.3, kubectl) on node2 as k3s.service and node3 joins as
k3s-agent.service; both Nodes are Ready with fresh heartbeats, the workload intent and the
PostgreSQL workload database exist; the traps real K3s leaves are there (a shim holding a GPU
and a pod tmpfs survive `systemctl stop`; PostgreSQL stops and starts with k3s); `remove`
leaves no trace. The session holds the lab exclusively while K3s is on the nodes."""

from __future__ import annotations

import json
import shlex
import time

import pytest

from .conftest import lab_command

SERVER, AGENT = "node2", "node3"
NODES = f"{SERVER},{AGENT}"
#: a Node is Ready only with a heartbeat this fresh (no controller-manager flips it: lab/k3s.py)
FRESH_S = 40


def k3s_status() -> dict:
    return json.loads(lab_command("k3s", "status", "--nodes", NODES).stdout)


@pytest.fixture(scope="module")
def k3s(lab, lab_session):
    lab_session.exclusive()
    try:
        lab_command("k3s", "remove", "--nodes", NODES)
        t0 = time.monotonic()
        lab_command("k3s", "install", "--server", SERVER, "--agents", AGENT, timeout=300)
        print(f"\nk3s install (1 server + 1 agent): {time.monotonic() - t0:.1f} s")
        yield lab
    finally:
        lab_command("k3s", "remove", "--nodes", NODES, check=False)
        lab_session.shared()


def kubectl(lab, *args: str) -> str:
    return lab.ssh(SERVER, "k3s kubectl " + shlex.join(args)).stdout


def test_nodes_ready_with_fresh_heartbeats_and_server_version(k3s):
    version = json.loads(kubectl(k3s, "version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == "v1.34.3"
    nodes = {n["metadata"]["name"]: n for n in json.loads(kubectl(k3s, "get", "nodes", "-o", "json"))["items"]}
    assert set(nodes) == {SERVER, AGENT}
    st = k3s_status()
    for name in (SERVER, AGENT):
        ready = next(c for c in nodes[name]["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        assert st[name]["node"]["ready"] and st[name]["node"]["heartbeat_age_s"] < FRESH_S, st[name]
        assert nodes[name]["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert st[SERVER]["role"] == "server" and st[AGENT]["role"] == "agent"
    assert st[SERVER]["services"]["k3s"] == {"active": "active", "enabled": "enabled"}
    assert st[AGENT]["services"]["k3s-agent"] == {"active": "active", "enabled": "enabled"}


def test_datastore_secrets_workloads_and_appdb(k3s):
    # kine's SQLite datastore in WAL mode; the token and the agent's env file are secrets
    out = k3s.ssh(SERVER, "cd /var/lib/rancher/k3s/server && ls db && stat -c '%a %n' token "
                          "/etc/rancher/k3s/k3s.yaml && sqlite3 db/state.db 'PRAGMA journal_mode;'").stdout
    assert "state.db-wal" in out and "600 token" in out and "600 /etc/rancher/k3s/k3s.yaml" in out
    assert out.split()[-1] == "wal"
    env = k3s.ssh(AGENT, "stat -c %a /etc/systemd/system/k3s-agent.service.env && "
                         "grep -c '^K3S_URL=.https://10.213.57.22:6443.$' /etc/systemd/system/k3s-agent.service.env").stdout
    assert env.split() == ["600", "1"]
    names = kubectl(k3s, "get", "deploy,ds,cronjob,cm,svc", "-n", "workloads", "-o", "name").split()
    for want in ("deployment.apps/inference-api", "daemonset.apps/gpu-metrics", "cronjob.batch/model-sync",
                 "configmap/inference-config", "service/inference-api"):
        assert want in names
    # the hostPath volumes hold real files on the nodes
    assert k3s.ssh(SERVER, "ls /srv/k3s-data/inference-api/models | wc -l").stdout.strip() == "5"
    assert k3s.ssh(AGENT, "ls /srv/k3s-data/gpu-metrics | wc -l").stdout.strip() == "3"
    tables = k3s.ssh(SERVER, "runuser -u postgres -- psql -tAX -d appdb -c "
                             "\"SELECT count(*) FROM pg_stat_user_tables\"").stdout.strip()
    assert int(tables) >= 55


def test_stop_leaves_shim_and_mount_and_postgres_follows_k3s(k3s):
    k3s.ssh(AGENT, "systemctl stop k3s-agent")
    held = k3s.ssh(AGENT, "for f in /proc/[0-9]*/fd/*; do [ \"$(readlink $f)\" = /dev/fakegpu0 ] && "
                          "echo ${f#/proc/}; done | cut -d/ -f1 | sort -u | "
                          "while read p; do cat /proc/$p/comm; done").stdout.split()
    assert held == ["containerd-shim"]
    st = k3s_status()[AGENT]
    assert st["services"]["k3s-agent"]["active"] == "inactive"
    assert [m["fstype"] for m in st["mounts"] if "kubernetes.io~empty-dir" in m["target"]] == ["tmpfs"]
    assert len(st["shims"]) == 1 and "/dev/fakegpu1" in st["shims"][0]["devices"]

    k3s.ssh(SERVER, "systemctl stop k3s")
    # PartOf= queues PostgreSQL's stop beside k3s's: `systemctl stop k3s` may return while it is
    # still deactivating
    assert k3s.ssh(SERVER, "for i in $(seq 60); do s=$(systemctl is-active postgresql@15-main); "
                           "[ \"$s\" = deactivating ] || break; sleep 0.5; done; echo $s",
                   check=False).stdout.strip() == "inactive"
    # the control plane stops with the unit (kine and kube-apiserver run from /srv/lab-k3s); the shim stays
    left = k3s.ssh(SERVER, "for p in /proc/[0-9]*; do case $(readlink $p/exe) in /srv/lab-k3s/*) "
                           "cat $p/comm;; esac; done; pgrep -x containerd-shim >/dev/null && echo shim").stdout.split()
    assert left == ["shim"]
    k3s.ssh(SERVER, "systemctl start k3s")
    assert k3s.ssh(SERVER, "systemctl is-active postgresql@15-main").stdout.strip() == "active"


def test_remove_leaves_no_trace(k3s):
    lab_command("k3s", "remove", "--nodes", NODES)
    st = k3s_status()
    for name in (SERVER, AGENT):
        assert st[name]["role"] is None and st[name]["shims"] == [] and st[name]["mounts"] == []
        assert all(s["active"] != "active" for s in st[name]["services"].values()), st[name]
        left = k3s.ssh(name, "ls -d /var/lib/rancher /var/lib/kubelet /etc/rancher /run/k3s /srv/k3s-data "
                             "/usr/local/bin/k3s /usr/local/bin/kubectl /etc/systemd/system/k3s* "
                             "/etc/postgresql 2>/dev/null; true").stdout.split()
        assert left == [], f"{name}: {left}"
