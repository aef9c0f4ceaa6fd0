"""The lab's K3s: `python -m lab k3s install | remove | status` on hosts of the running lab.

What a real fleet's K3s nodes look like, at K3s's own paths, built from the parts K3s is made
of (no registry reachable here serves K3s): kine on SQLite (`server/db/state.db`, WAL) and the
real kube-apiserver and kubectl of k8s.io/kubernetes (scripts/setup.sh builds them once per
machine into `<cache>/k3s-lab/<key>/`, which every node has bound read-only at /srv/lab-k3s).
The server runs `k3s.service`, the agents `k3s-agent.service`, each as K3s's install.sh writes
it (KillMode=process, Delegate=yes, Restart=always, EnvironmentFile=...service.env); the
server also acts as an agent. PostgreSQL 15 (Debian) runs on the server as a workload database
(`appdb`, 58 user tables) whose unit is PartOf=k3s.service.

TEST DOUBLES, only where the lab has no hardware or runtime: no kubelet and no containerd. The
agent part of /usr/local/bin/k3s (lab/k3s-wrapper.sh) registers the Node and heartbeats its
Ready condition every 10 s; a detached `containerd-shim-runc-v2` (lab/onhost/k3s_shim.py) holds the
node's fake GPUs (/dev/fakegpu0, /dev/fakegpu1) open and a tmpfs stays mounted under
/var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~empty-dir/cache; both survive `systemctl
stop`, as real K3s's do. Nothing runs the workloads' pods. No controller-manager marks a dead
agent's Node NotReady: a node is Ready when its Ready condition is True AND its
lastHeartbeatTime is fresher than READY_HEARTBEAT_S.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import io
import json
import secrets
import shlex
import subprocess
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import stackfile
from .common import ROOT, LabError, k3s_cache_dir, log, rel, require_root, run
from .hosts import Host
from .ssh import ssh_argv

HERE = Path(__file__).resolve().parent
#: what runs on the nodes (the shim double, the status probe): read as text, never imported
ONHOST = HERE / "onhost"
PARTS_LINK = ROOT / ".tools" / "k3s-lab"
K8S_VERSION = "v1.34.3"
DATA = "/var/lib/rancher/k3s"
SERVER_UNIT = "k3s"
AGENT_UNIT = "k3s-agent"
PG_UNIT = "postgresql@15-main"
KUBECONFIG = "/etc/rancher/k3s/k3s.yaml"
SHIM_DEVICES = ("/dev/fakegpu0", "/dev/fakegpu1")
SERVICE_CIDR = "10.43.0.0/16"
#: a Ready condition counts only with a heartbeat this fresh (the agents beat every 10 s)
READY_HEARTBEAT_S = 40
#: user/group the K3s token authenticates as (RBAC in server/manifests/k3s-lab-agents.yaml)
AGENT_USER = "system:k3s-agent"
AGENT_GROUP = "k3s:agents"

UNIT_HEAD = """\
[Unit]
Description=Lightweight Kubernetes
Documentation=https://k3s.io
Wants=network-online.target
After=network-online.target

[Install]
WantedBy=multi-user.target

[Service]
Type=exec
EnvironmentFile=-/etc/default/%N
EnvironmentFile=-/etc/sysconfig/%N
EnvironmentFile=-/etc/systemd/system/{unit}.service.env
KillMode=process
Delegate=yes
User=root
# Having non-zero Limit*s causes performance problems due to accounting overhead
# in the kernel. We recommend using cgroups to do container-local accounting.
LimitNOFILE=1048576
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
TimeoutStartSec=0
Restart=always
RestartSec=5s
ExecStartPre=-/sbin/modprobe br_netfilter
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/k3s \\
    {cmd} \\

"""

AGENT_RBAC = f"""\
# The lab's K3s: what the agents' token may do (register and heartbeat their Node), applied by
# the server at start like K3s's own bootstrap manifests.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: k3s-lab-agent
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch, create, patch, update]
- apiGroups: [""]
  resources: [nodes/status]
  verbs: [get, patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: k3s-lab-agent
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: k3s-lab-agent}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "{AGENT_GROUP}"}}
"""


# --- pure renderers ------------------------------------------------------------------------

def render_unit(role: str) -> str:
    """k3s.service / k3s-agent.service as K3s's install.sh writes them (Type=exec: the lab's
    k3s sends no sd_notify)."""
    unit = SERVER_UNIT if role == "server" else AGENT_UNIT
    return UNIT_HEAD.format(unit=unit, cmd=role)


def render_config(name: str, address: str, role: str) -> str:
    labels = ["gpu-fleet.io/gpu-model=v100", "nvidia.com/gpu.count=8"]
    lines = [
        "# /etc/rancher/k3s/config.yaml (gpu-fleet lab: python -m lab k3s install)",
        f"node-name: {name}",
        f"node-ip: {address}",
    ]
    if role == "server":
        labels = ["node-role.kubernetes.io/control-plane=true", "node-role.kubernetes.io/master=true", *labels]
        lines += [
            f"advertise-address: {address}",
            'write-kubeconfig-mode: "0600"',
            "cluster-cidr: 10.42.0.0/16",
            f"service-cidr: {SERVICE_CIDR}",
            "cluster-dns: 10.43.0.10",
            "disable:",
            "  - traefik",
            "  - servicelb",
        ]
    lines.append("node-label:")
    lines += [f'  - "{x}"' for x in labels]
    return "\n".join(lines) + "\n"


def render_env(role: str, server_address: str, token: str) -> str:
    if role == "server":
        return "# K3S_* settings of k3s.service (none: /etc/rancher/k3s/config.yaml has them)\n"
    return f"K3S_URL='https://{server_address}:6443'\nK3S_TOKEN='{token}'\n"


def render_kubeconfig(server_url: str, ca: bytes, cert: bytes, key: bytes) -> str:
    b = lambda x: base64.b64encode(x).decode()  # noqa: E731
    return (
        "apiVersion: v1\nclusters:\n- cluster:\n"
        f"    certificate-authority-data: {b(ca)}\n    server: {server_url}\n  name: default\n"
        "contexts:\n- context:\n    cluster: default\n    user: default\n  name: default\n"
        "current-context: default\nkind: Config\npreferences: {}\nusers:\n- name: default\n  user:\n"
        f"    client-certificate-data: {b(cert)}\n    client-key-data: {b(key)}\n"
    )


PG_DROPIN = """\
# gpu-fleet lab: PostgreSQL is a K3s workload database here; it stops with k3s.service
[Unit]
PartOf=k3s.service
"""
K3S_PG_DROPIN = f"""\
# gpu-fleet lab: the workload database starts with K3s (and before it)
[Unit]
Wants={PG_UNIT}.service
After={PG_UNIT}.service
"""


# --- PKI (openssl on this machine: the hosts have no openssl binary) ----------------------------

def _openssl(*args: str, cwd: Path) -> None:
    run(["openssl", *args], cwd=cwd)


def make_pki(name: str, address: str) -> dict[str, bytes]:
    """The server's tls/ directory (file name -> PEM) and the admin client certificate."""
    with tempfile.TemporaryDirectory(prefix="k3s-pki-") as d:
        t = Path(d)

        def key(n: str) -> None:
            _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{n}.key", cwd=t)

        def ca(n: str, cn: str) -> None:
            key(n)
            _openssl("req", "-x509", "-new", "-key", f"{n}.key", "-subj", f"/CN={cn}", "-days", "3650",
                     "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
                     "-out", f"{n}.crt", cwd=t)

        def leaf(n: str, signer: str, subj: str, ext: str) -> None:
            key(n)
            _openssl("req", "-new", "-key", f"{n}.key", "-subj", subj, "-out", f"{n}.csr", cwd=t)
            (t / f"{n}.ext").write_text(ext)
            _openssl("x509", "-req", "-in", f"{n}.csr", "-CA", f"{signer}.crt", "-CAkey", f"{signer}.key",
                     "-CAcreateserial", "-days", "3650", "-extfile", f"{n}.ext", "-out", f"{n}.crt", cwd=t)

        now = int(time.time())
        ca("server-ca", f"k3s-server-ca@{now}")
        ca("client-ca", f"k3s-client-ca@{now}")
        sans = ",".join([f"IP:{address}", "IP:127.0.0.1", "IP:10.43.0.1", f"DNS:{name}", "DNS:localhost",
                         "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                         "DNS:kubernetes.default.svc.cluster.local"])
        leaf("serving-kube-apiserver", "server-ca", "/CN=kube-apiserver",
             f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
             f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n")
        leaf("client-admin", "client-ca", "/O=system:masters/CN=system:admin",
             "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
             "extendedKeyUsage=clientAuth\n")
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "service.key", cwd=t)
        out = {}
        for f in ("server-ca.crt", "server-ca.key", "client-ca.crt", "client-ca.key",
                  "serving-kube-apiserver.crt", "serving-kube-apiserver.key",
                  "client-admin.crt", "client-admin.key", "service.key"):
            out[f] = (t / f).read_bytes()
        out["service.current.key"] = out["service.key"]
        return out


def make_token(server_ca: bytes) -> str:
    """A K3s "secure" token: K10<sha256 of the server CA>::server:<random>."""
    return f"K10{hashlib.sha256(server_ca).hexdigest()}::server:{secrets.token_hex(16)}"


# --- bundles -----------------------------------------------------------------------------------

def _tar(files: dict[str, tuple[bytes | str, int]], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, (data, mode) in sorted(files.items()):
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(raw), mode, int(time.time())
            tar.addfile(info, io.BytesIO(raw))
        for path, target in sorted((links or {}).items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def common_files(key: str, name: str, address: str, role: str) -> dict[str, tuple[bytes | str, int]]:
    return {
        "/usr/local/bin/k3s": ((HERE / "k3s-wrapper.sh").read_text(), 0o755),
        "/usr/local/bin/k3s-killall.sh": ((HERE / "k3s-killall.sh").read_text(), 0o755),
        f"{DATA}/data/{key}/bin/containerd-shim-runc-v2": ((ONHOST / "k3s_shim.py").read_text(), 0o755),
        f"{DATA}/agent/etc/lab-gpu-devices": ("".join(d + "\n" for d in SHIM_DEVICES), 0o644),
        "/etc/rancher/k3s/config.yaml": (render_config(name, address, role), 0o600),
    }


def server_bundle(key: str, h: Host, pki: dict[str, bytes], token: str) -> bytes:
    tls = f"{DATA}/server/tls"
    files = common_files(key, h.name, h.address, "server")
    files.update({f"{tls}/{f}": (data, 0o600 if f.endswith(".key") else 0o644) for f, data in pki.items()})
    files.update({
        f"{DATA}/server/token": (token + "\n", 0o600),
        f"{DATA}/server/cred/passwd": (f"{token},{AGENT_USER},{AGENT_USER},{AGENT_GROUP}\n", 0o600),
        f"{DATA}/server/manifests/k3s-lab-agents.yaml": (AGENT_RBAC, 0o600),
        f"{DATA}/agent/server-ca.crt": (pki["server-ca.crt"], 0o644),
        KUBECONFIG: (render_kubeconfig("https://127.0.0.1:6443", pki["server-ca.crt"],
                                       pki["client-admin.crt"], pki["client-admin.key"]), 0o600),
        f"/etc/systemd/system/{SERVER_UNIT}.service": (render_unit("server"), 0o644),
        f"/etc/systemd/system/{SERVER_UNIT}.service.env": (render_env("server", h.address, token), 0o600),
        f"/etc/systemd/system/{SERVER_UNIT}.service.d/10-workload-db.conf": (K3S_PG_DROPIN, 0o644),
        f"/etc/systemd/system/{PG_UNIT}.service.d/10-k3s.conf": (PG_DROPIN, 0o644),
    })
    return _tar(files, {f"{DATA}/server/node-token": f"{DATA}/server/token"})


def agent_bundle(key: str, h: Host, server: Host, server_ca: bytes, token: str) -> bytes:
    files = common_files(key, h.name, h.address, "agent")
    files.update({
        f"{DATA}/agent/server-ca.crt": (server_ca, 0o644),
        f"/etc/systemd/system/{AGENT_UNIT}.service": (render_unit("agent"), 0o644),
        f"/etc/systemd/system/{AGENT_UNIT}.service.env": (render_env("agent", server.address, token), 0o600),
    })
    return _tar(files)


# --- running on hosts --------------------------------------------------------------------------

def _ssh(h: Host, script: str, *args: str, stdin: bytes | None = None, timeout: float = 300,
         check: bool = True) -> str:
    cmd = shlex.join(["bash", "-c", script, f"lab-k3s-{h.name}", *args])
    p = subprocess.run([*ssh_argv(h.address, connect_timeout=10), "--", cmd], input=stdin or b"",
                       capture_output=True, timeout=timeout)
    out = p.stdout.decode(errors="replace")
    if check and p.returncode != 0:
        raise LabError(f"host {h.name}: exit {p.returncode}:\n{out.strip()}\n"
                       f"{p.stderr.decode(errors='replace').strip()}")
    return out


def _script(name: str) -> str:
    return (HERE / name).read_text()


def lab_nodes(names: list[str]) -> dict[str, Host]:
    hosts = {h.name: h for h in stackfile.running_inventory()[1]}
    for n in names:
        if n not in hosts:
            raise LabError(f"no lab host {n!r} (hosts: {', '.join(hosts)})")
        if "node" not in hosts[n].roles:
            raise LabError(f"{n} is not a compute node (K3s runs on nodes only)")
    return hosts


def parts_key() -> str:
    """The cached parts' key (`.tools/k3s-lab` -> `<cache>/k3s-lab/<key>`), checked."""
    try:
        target = PARTS_LINK.resolve(strict=True)
    except OSError:
        raise LabError(f"{rel(PARTS_LINK)} is missing: run `make setup` (it builds kine, "
                       f"kube-apiserver and kubectl {K8S_VERSION} once per machine)") from None
    if target.parent != k3s_cache_dir().resolve() or not (target / ".ok").exists():
        raise LabError(f"{rel(PARTS_LINK)} -> {target}: not a finished build in {k3s_cache_dir()} "
                       "(run `make setup`)")
    return target.name


def server_kubectl(h: Host, *args: str, stdin: bytes | None = None, check: bool = True) -> str:
    return _ssh(h, 'exec /usr/local/bin/k3s kubectl --request-timeout=10s "$@"', *args,
                stdin=stdin, check=check, timeout=60)


def install(server: str, agents: list[str], wait: float = 120.0) -> dict:
    require_root()
    if server in agents:
        raise LabError(f"{server} cannot be the server and an agent")
    hosts = lab_nodes([server, *agents])
    key = parts_key()
    start = time.monotonic()
    sh, ahs = hosts[server], [hosts[a] for a in agents]
    pki = make_pki(sh.name, sh.address)
    token = make_token(pki["server-ca.crt"])
    script = _script("k3s-install.sh")
    jobs = [(sh, server_bundle(key, sh, pki, token), "server")]
    jobs += [(a, agent_bundle(key, a, sh, pki["server-ca.crt"], token), "agent") for a in ahs]
    with ThreadPoolExecutor(max_workers=len(jobs)) as ex:
        futs = [ex.submit(_ssh, h, script, role, key, stdin=bundle) for h, bundle, role in jobs]
        for f in futs:
            out = f.result().strip()
            if out:
                log(f"  {out.splitlines()[-1]}")
    deadline = time.monotonic() + wait
    while True:  # right after /readyz the default ServiceCIDR may not be usable yet: retry
        try:
            server_kubectl(sh, "apply", "-f", "-", stdin=(HERE / "k3s-workloads.yaml").read_bytes())
            break
        except LabError as e:
            if time.monotonic() > deadline:
                raise LabError(f"applying lab/k3s-workloads.yaml on {server} failed: {e}") from None
            time.sleep(1)
    names = [server, *agents]
    while True:
        nodes = node_readiness(sh)
        missing = [n for n in names if not nodes.get(n, {}).get("ready")]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise LabError(f"K3s nodes not Ready after {wait:g} s: {', '.join(missing)} "
                           f"(journalctl -u {AGENT_UNIT} on them)")
        time.sleep(1)
    took = time.monotonic() - start
    log(f"K3s {K8S_VERSION} on {server} (server) + {', '.join(agents) or 'no agents'}: "
        f"{len(names)} nodes Ready in {took:.1f} s")
    return {"server": server, "agents": agents, "seconds": round(took, 1)}


def remove(names: list[str]) -> None:
    require_root()
    hosts = lab_nodes(names)
    start = time.monotonic()
    killall, rm = _script("k3s-killall.sh"), _script("k3s-remove.sh")
    both = f"bash -c {shlex.quote(killall)} k3s-killall && bash -c {shlex.quote(rm)} k3s-remove"
    with ThreadPoolExecutor(max_workers=len(names)) as ex:
        outs = list(ex.map(lambda n: _ssh(hosts[n], both), names))
    for o in outs:
        if o.strip():
            log(f"  {o.strip().splitlines()[-1]}")
    log(f"K3s removed from {', '.join(names)} in {time.monotonic() - start:.1f} s")


# --- status ------------------------------------------------------------------------------------

def readiness(nodes_json: str, now: float) -> dict[str, dict]:
    """Node name -> Ready condition, heartbeat age (s) and `ready` (True AND fresher than
    READY_HEARTBEAT_S), from `kubectl get nodes -o json` (pure)."""
    try:
        items = json.loads(nodes_json)["items"]
    except (ValueError, KeyError, TypeError):
        return {}
    res = {}
    for it in items:
        cond: dict = next((c for c in it.get("status", {}).get("conditions", []) if c.get("type") == "Ready"), {})
        hb = cond.get("lastHeartbeatTime")
        age = round(now - calendar.timegm(time.strptime(hb, "%Y-%m-%dT%H:%M:%SZ")), 1) if hb else None
        res[it["metadata"]["name"]] = {
            "condition": cond.get("status", "Unknown"), "heartbeat_age_s": age,
            "ready": cond.get("status") == "True" and age is not None and age < READY_HEARTBEAT_S,
            "gpus": it.get("status", {}).get("capacity", {}).get("nvidia.com/gpu"),
        }
    return res


def node_readiness(server: Host) -> dict[str, dict]:
    """`readiness` of every Node, asked of the server's kube-apiserver."""
    return readiness(server_kubectl(server, "get", "nodes", "-o", "json", check=False), time.time())


def status(names: list[str] | None = None) -> dict:
    require_root()
    inv_hosts = lab_nodes([])
    nodes = names or [n for n, h in inv_hosts.items() if "node" in h.roles]
    hosts = lab_nodes(nodes)
    probe = (ONHOST / "k3s_status.py").read_text()
    with ThreadPoolExecutor(max_workers=len(nodes)) as ex:
        raw = list(ex.map(lambda n: _ssh(hosts[n], 'exec python3 - "$@"', stdin=probe.encode()), nodes))
    result = {n: json.loads(r) for n, r in zip(nodes, raw)}
    servers = [n for n in nodes
               if result[n]["role"] == "server" and result[n]["services"][SERVER_UNIT]["active"] == "active"]
    ready = node_readiness(hosts[servers[0]]) if servers else {}
    for n in nodes:
        result[n]["node"] = ready.get(n)
    return result


def main(args) -> int:
    if args.k3s_cmd == "install":
        install(args.server, [a for a in (args.agents or "").split(",") if a])
    elif args.k3s_cmd == "remove":
        remove([n for n in args.nodes.split(",") if n])
    else:
        print(json.dumps(status([n for n in (args.nodes or "").split(",") if n] or None), indent=1))
    return 0
