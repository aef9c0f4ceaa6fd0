"""The K3s retirement layer on the lab (issue 18): the lab's K3s (python -m lab k3s: real kine,
kube-apiserver, kubectl, PostgreSQL; the kubelet's Node heartbeat and the shim holding the fake
GPUs are the test doubles) on node2 (server) and node3 (agent), retired into Slurm by the lab
stack and brought back by destroy.

In order, on one K3s cluster, after the Slurm canary cluster (node1) is up without them:

1. a node spec that differs from the node stops the retirement at the audit, naming both
   values, and nothing changes on the K3s nodes;
2. `pulumi up` killed (-9) in the middle of the preserve (after the datastore's marker): K3s
   still runs everywhere and nothing is sealed; the next `up` (after `make up`'s runlock step)
   finds the finished steps, runs only the others, keeps the first baseline, seals, stops the
   agent then the server, and Slurm takes both nodes (the acceptance job runs on them); K3s
   left nothing: no process, no GPU holder, no mount, units disabled with the condition;
3. a second `up` changes nothing;
4. both nodes taken out of the retirement (and the partition), with the server's datastore
   gone meanwhile: Slurm releases them first (drained, out of slurm.conf) and keeps serving
   node1; the datastore comes back from the bundle, K3s runs again with every exported
   object, the same appdb tables and rows, both nodes Ready; the bundle stays;
5. a new change ID retires again; an object deleted from the datastore meanwhile, `pulumi
   destroy` brings K3s back once more, the object created again from the bundle.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
import yaml

from tests.pulumi_cli import PulumiProject

from .conftest import lab_command
from .labhosts import ssh
from .test_interruptions import UP, runlock

SERVER, AGENT = "node2", "node3"
BUNDLE = "/srv/gpu-fleet/backup/k3s"
COUNTS = ("runuser -u postgres -- psql -X -At -d appdb -c \"SELECT count(*) FROM information_schema.tables "
          "WHERE table_type='BASE TABLE' AND table_schema NOT IN ('pg_catalog','information_schema')\"")
KUBECTL = "kubectl --kubeconfig /etc/rancher/k3s/k3s.yaml"


def k3s_status() -> dict:
    return json.loads(lab_command("k3s", "status", "--nodes", f"{SERVER},{AGENT}").stdout)


def objects() -> list[str]:
    out = ssh(SERVER, f"{KUBECTL} get deployments,daemonsets,cronjobs,services,configmaps -n workloads "
                      "-o name").stdout.split()
    return sorted(o for o in out if not o.endswith("/kube-root-ca.crt"))


def table_rows() -> dict:
    q = ("SELECT json_object_agg(relname, n_live_tup) FROM pg_stat_user_tables")
    ssh(SERVER, "runuser -u postgres -- psql -X -At -d appdb -c 'ANALYZE'")
    return json.loads(ssh(SERVER, f"runuser -u postgres -- psql -X -At -d appdb -c \"{q}\"").stdout)


def retired(node: str, unit: str) -> None:
    """K3s is stopped and kept on `node`: disabled, inactive, the drop-in condition and marker,
    no K3s process, no GPU holder, nothing mounted under the kubelet or rancher paths; its
    binaries and data still there."""
    out = ssh(node, f"""
        echo "units $(systemctl is-enabled {unit}) $(systemctl is-active {unit})"
        test -f /etc/systemd/system/{unit}.d/gpu-fleet-retired.conf && echo condition
        cat /etc/gpu-fleet/k3s-retired
        pgrep -a -x 'containerd-shim|kine|kube-apiserver|k3s' || echo no-k3s-process
        for fd in /proc/[0-9]*/fd/*; do readlink "$fd"; done 2>/dev/null | grep -c '^/dev/fakegpu' || true
        awk '$2 ~ "^/var/lib/kubelet|^/run/k3s" {{print "mounted", $2}}' /proc/mounts
        test -x /usr/local/bin/k3s && echo binary-kept
        """, check=False).stdout
    assert "units disabled inactive" in out and "condition" in out and "no-k3s-process" in out, out
    assert "\n0\n" in out and "mounted" not in out and "binary-kept" in out, out


@pytest.fixture(scope="module")
def k3s(lab, lab_session):
    lab_command("k3s", "install", "--server", SERVER, "--agents", AGENT, timeout=900)
    yield
    lab_command("k3s", "remove", "--nodes", f"{SERVER},{AGENT}", check=False, timeout=600)
    ssh("storage", f"rm -rf {BUNDLE}", check=False)


@pytest.fixture(scope="module")
def proj(k3s, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("k3s-retirement")
    p = PulumiProject.copy_of_repo(tmp)
    p.init_stack("lab")
    (p.dir / "lab.orig.yaml").write_text((p.dir / "stacks" / "Pulumi.lab.yaml").read_text())
    # the Slurm canary cluster first (node1), K3s untouched: the seed moved K3s nodes only once
    # the canary was stable (and a run killed below then interrupts only the retirement)
    configure(p, None)
    up(p)
    yield p
    p.run("destroy", "--yes", "--stack", "lab", check=False, timeout=1200)


def configure(proj: PulumiProject, change_id: str | None, **spec) -> None:
    """The lab stack with node2 and node3 owned by K3s: retired under `change_id` (in the
    partition), or not retired at all (None: out of the partition)."""
    path = proj.dir / "stacks" / "Pulumi.lab.yaml"
    doc = yaml.safe_load((proj.dir / "lab.orig.yaml").read_text())  # the lab's stack, secrets included
    c = doc["config"]
    for n in c["gpu-fleet:nodes"]:
        if n["name"] in (SERVER, AGENT):
            n["owner"] = "k3s"
            n.update(spec.get(n["name"], {}))
    if change_id is None:
        c["gpu-fleet:slurm"]["partitions"][0]["nodes"] = ["node1"]
    else:
        c["gpu-fleet:k3s_retirement"] = {"enabled": True, "change_id": change_id, "server": SERVER,
                                         "retire": [SERVER, AGENT], "batch_size": 1, "timeout_s": 240}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def up(proj: PulumiProject, check: bool = True) -> subprocess.CompletedProcess:
    p = proj.up(check=False, timeout=1500)
    if check:
        # the errors first: the stack's outputs diff after them can fill any tail
        at = p.stdout.find("Diagnostics:")
        diag = p.stdout[at:p.stdout.find("Outputs:", at)] if at >= 0 else ""
        assert p.returncode == 0, diag[:8000] + "\n...\n" + (p.stdout + p.stderr)[-3000:]
    return p



def test_a_spec_that_differs_stops_the_retirement_at_the_audit(proj):
    configure(proj, "lab-r1", node3={"cpus": 64})
    p = up(proj, check=False)
    text = p.stdout + p.stderr
    assert p.returncode != 0
    assert "node node3: 2 CPUs online, the stack declares cpus: 64" in text, text[-4000:]
    assert "nothing was changed on any node" in text
    st = k3s_status()
    assert st[SERVER]["services"]["k3s"]["active"] == "active", st
    assert ssh("storage", f"test -e {BUNDLE}/lab-r1", check=False).returncode != 0


def test_an_interrupted_retirement_resumes_its_change(proj):
    configure(proj, "lab-r1")
    before = {"objects": objects(), "tables": int(ssh(SERVER, COUNTS).stdout), "rows": table_rows()}
    assert before["tables"] >= 50 and len(before["objects"]) >= 5, before
    (proj.dir / "before.json").write_text(json.dumps(before))
    marker = f"{BUNDLE}/lab-r1/{SERVER}/steps/datastore.done"
    run = subprocess.Popen(UP, cwd=proj.dir, env=proj.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and run.poll() is None:
        if ssh("storage", f"test -f {marker}", check=False).returncode == 0:
            break
        time.sleep(0.2)
    assert run.poll() is None, f"up ended before {marker}:\n{run.communicate()[0][-3000:]}"
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=60)
    time.sleep(3)
    # nothing stopped before the seal
    st = k3s_status()
    assert st[SERVER]["services"]["k3s"]["active"] == "active", st
    assert st[AGENT]["services"]["k3s-agent"]["active"] == "active", st
    assert ssh("storage", f"ls {BUNDLE}/lab-r1/{SERVER}/SEAL", check=False).returncode != 0
    baseline = ssh("storage", f"sha256sum {BUNDLE}/lab-r1/{SERVER}/baseline.json").stdout.split()[0]

    r = runlock(proj)  # what `make up` runs first: the killed run's lock and pending creates
    assert r.returncode != 0 and "pulumi cancel" in r.stdout + r.stderr, r.stdout + r.stderr
    proj.run("cancel", "--yes", "--stack", "lab")
    r = runlock(proj)
    assert r.returncode == 0, r.stdout + r.stderr
    up(proj)
    out = proj.outputs()
    pre = out["k3sRetirement"]["preserve"][SERVER]
    assert {"baseline", "datastore"} <= set(pre["foundDone"]), pre
    assert "datastore" not in pre["ran"] and "api" in pre["ran"] + pre["foundDone"], pre
    assert pre["postgres"]["appdb"]["tables"] == before["tables"], pre
    assert ssh("storage", f"sha256sum {BUNDLE}/lab-r1/{SERVER}/baseline.json").stdout.split()[0] == baseline
    assert sorted(out["k3sRetirement"]["handedOver"]) == [SERVER, AGENT]
    assert set(out["admission"]["admitted"]) == {"node1", SERVER, AGENT}
    assert (out["acceptance"]["accepted"] == out["admission"]["admitted"] and not out["acceptance"]["failed"])
    retired(SERVER, "k3s.service")
    retired(AGENT, "k3s-agent.service")
    assert ssh(SERVER, "systemctl is-active postgresql@15-main", check=False).stdout.strip() != "active"
    sinfo = ssh("ctl", "sinfo -h -N -o '%N %t'").stdout
    assert f"{SERVER} idle" in sinfo and f"{AGENT} idle" in sinfo, sinfo
    assert ssh("storage", f"cat {BUNDLE}/lab-r1/{AGENT}/SEAL").stdout.startswith('{"manifest_sha256"')


def test_a_second_up_changes_nothing(proj):
    proj.run("preview", "--stack", "lab", "--expect-no-changes", timeout=600)


def back(before: dict) -> None:
    """K3s runs again as before the retirement."""
    st = k3s_status()
    for n in (SERVER, AGENT):
        assert (st[n]["node"] or {}).get("ready") is True, st
    assert objects() == before["objects"]
    assert int(ssh(SERVER, COUNTS).stdout) == before["tables"]
    assert table_rows() == before["rows"]
    for n, unit in ((SERVER, "k3s"), (AGENT, "k3s-agent")):
        assert ssh(n, f"systemctl is-enabled {unit}").stdout.strip() == "enabled"
        assert ssh(n, f"test -e /etc/systemd/system/{unit}.service.d/gpu-fleet-retired.conf",
                   check=False).returncode != 0


def test_taking_nodes_out_of_the_retirement_releases_them_and_restores_k3s(proj):
    before = json.loads((proj.dir / "before.json").read_text())
    # the datastore lost while K3s was retired: the rollback restores it from the bundle
    ssh(SERVER, "mkdir -p /root/lost && mv /var/lib/rancher/k3s/server/db/state.db* /root/lost/")
    configure(proj, None)
    up(proj)
    # Slurm released both first: drained (the release step's reason in slurmctld's log)
    log = ssh("ctl", "grep -h 'leaving the cluster' /var/log/slurm/slurmctld.log", check=False).stdout
    assert SERVER in log and AGENT in log, log
    back(before)
    assert ssh("storage", f"test -f {BUNDLE}/lab-r1/{SERVER}/SEAL", check=False).returncode == 0
    sinfo = ssh("ctl", "sinfo -h -N -o '%N %t'").stdout.split("\n")
    assert {ln.split()[0] for ln in sinfo if ln.strip()} == {"node1"}, sinfo
    assert ssh(SERVER, "systemctl is-active slurmd", check=False).stdout.strip() != "active"


def test_a_new_change_retires_again_and_destroy_restores(proj):
    before = json.loads((proj.dir / "before.json").read_text())
    configure(proj, "lab-r2")
    up(proj)
    assert sorted(proj.outputs()["k3sRetirement"]["handedOver"]) == [SERVER, AGENT]
    retired(AGENT, "k3s-agent.service")
    # an object lost from the datastore while retired: the rollback creates it again from the bundle
    ssh(SERVER, "sqlite3 /var/lib/rancher/k3s/server/db/state.db \"DELETE FROM kine WHERE name = "
                "'/registry/configmaps/workloads/inference-config'\"")
    p = proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=1500)
    assert p.returncode == 0, (p.stdout + p.stderr)[-5000:]
    back(before)
