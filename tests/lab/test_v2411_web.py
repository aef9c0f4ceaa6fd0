"""The web layer on the lab (issues 15, 38): the real Slurm-web 6.0.0 as hardened podman containers
on ctl, on Slurm 24.11 (Slurm-web reads slurmrestd's API 0.0.41 and later; 22.05 is refused).

The images are built from the vendored Slurm-web source by `python -m lab web-images` (lab/web_images:
Debian 12's Python, pinned wheels, the frontend from its lock file) and served by the lab's registry
on storage:5000. Everything is real: podman 4.3.1, crun, netavark and aardvark-dns on ctl (booted
with the v1 cgroup controllers, lab/nspawn.py), slurmrestd 24.11 on its Unix socket, slurmctld
minting the tokens, and headless Chromium on this machine loading the page through an SSH tunnel to
ctl's loopback port. It runs on the shared 24.11 stack (conftest `release24`; test_v2411_tenancy
leaves it with accounting on) and turns the layer on over the running fleet.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from components.layers.web.config import RESTD_APIS
from tests.pulumi_cli import PulumiProject

from .conftest import lab_command
from .labhosts import ROOT, lab_conn, ssh
from .test_slurm_cluster import NODES, as_user

CTL = "10.213.57.11"
PORT = 8080
UID = "64210:64210"
ARTIFACTS = Path(os.environ.get("GPU_FLEET_ARTIFACTS", ROOT / ".state" / "artifacts")) / "web"
AGENT_INI = "/etc/gpu-fleet/web/agent/agent.ini"
CONTAINERS = {"agent": "slurm-web-agent", "gateway": "slurm-web-gateway"}
CLUSTER = "lab"  # the lab stack's slurm.cluster_name
API = f"/api/agents/{CLUSTER}"
RESTD_API = "v0.0.41"
#: the containers' CPU limit here: Slurm-web starts (its imports) in about 7 s at the layer's default
#: of 0.5 CPU on this loaded 2-core machine, and the module (re)starts the containers a dozen times
LAB_CPUS = 2
#: the watchdog at its fastest for the whole module: every test also runs with it firing
HEALTH_INTERVAL_S = 2
#: the token in the agent's settings, from a file of that shape ($1)
TOKEN_OF = "sed -n 's/^jwt_token=//p'"


def up(proj: PulumiProject, check: bool = True) -> subprocess.CompletedProcess:
    p = proj.up(check=False, timeout=1200)
    if check:
        text = p.stdout + p.stderr
        at = text.find("Diagnostics:")
        assert p.returncode == 0, text[at:at + 6000] if at >= 0 else text[-5000:]
    return p


def setc(proj: PulumiProject, path: str, value: str) -> None:
    proj.run("config", "set", "--path", f"gpu-fleet:{path}", value, "--stack", "lab")


def output(proj: PulumiProject, name: str):
    return json.loads(proj.run("stack", "output", name, "--json", "--show-secrets", "--stack", "lab").stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: through the gateway on ctl's loopback, as an anonymous visitor: `python3 - PORT METHOD PATH...`
VISIT = r"""
import http.client, json, sys
port = int(sys.argv[1])
def req(method, path, token=None):
    # a write carries a JSON body, as the UI sends it (without one Flask answers 415 first)
    body = None if method == "GET" else "{}"
    headers = {"Content-Type": "application/json"} if body else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    except OSError as e:  # a gateway restarting: refused, as a visitor would see it
        return type(e).__name__, b""
    finally:
        c.close()
status, body = req("GET", "/api/anonymous")
token = json.loads(body)["token"] if status == 200 else None
for pair in sys.argv[2:]:
    method, path = pair.split(" ", 1)
    print(method, path, req(method, path, token)[0])
"""


def visit(*calls: str) -> dict[str, str]:
    """`METHOD PATH` -> the status the gateway answered."""
    args = " ".join(f"'{c}'" for c in calls)
    out = ssh("ctl", f"python3 - {PORT} {args} <<'PY'\n{VISIT}\nPY").stdout
    return {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in out.splitlines() if line.strip()}


def wait_for(what, timeout: float = 60, every: float = 1):
    end = time.monotonic() + timeout
    while True:
        got = what()
        if got or time.monotonic() > end:
            return got
        time.sleep(every)


@pytest.fixture(scope="module")
def web(release24):
    lab_command("web-images", timeout=1800)  # the first build on a machine: wheels, npm ci, vite
    images = json.loads((ROOT / ".state" / "lab" / "web-images.json").read_text())
    proj = release24
    assert ssh("ctl", "slurmctld -V").stdout.split() == ["slurm-wlm", "24.11.5"]
    local = free_port()
    for path, value in [("accounting.enabled", "true"), ("web.enabled", "true"),
                        ("web.agent_image", images["agent"]), ("web.gateway_image", images["gateway"]),
                        ("web.runtime.cgroup_manager", "cgroupfs"), ("web.runtime.keyring", "false"),
                        ("web.runtime.default_sysctls", "false"),
                        ("web.limits.cpus", str(LAB_CPUS)), ("web.health_interval_s", str(HEALTH_INTERVAL_S)),
                        ("web.runtime.insecure_registries[0]", images["registry"]),
                        # the browser's address: the test's end of its SSH tunnel
                        ("web.public_url", f"http://127.0.0.1:{local}")]:
        setc(proj, path, value)
    proj.images = images
    proj.local_port = local
    try:
        t0 = time.monotonic()
        up(proj)
        proj.first_up_s = time.monotonic() - t0
        yield proj
    finally:
        proj.run("config", "rm", "--path", "gpu-fleet:web", "--stack", "lab", check=False)


def test_slurm_web_is_refused_on_22_05_before_any_host_is_touched(web, tmp_path):
    proj = PulumiProject.copy_of_repo(tmp_path)
    proj.init_stack("lab")
    for path, value in [("accounting.enabled", "true"), ("web.enabled", "true"),
                        ("web.agent_image", web.images["agent"]), ("web.gateway_image", web.images["gateway"])]:
        setc(proj, path, value)
    p = proj.run("preview", "--stack", "lab", check=False, timeout=300)
    text = p.stdout + p.stderr
    assert p.returncode != 0
    assert "gpu-fleet:web.enabled: Slurm-web 6.0.0 reads slurmrestd's API 0.0.41 to 0.0.44" in text, text[-3000:]
    assert "gpu-fleet:slurm.release.version is 22.05" in text and "Pulumi.lab.yaml" in text, text[-3000:]


# ---- the page, as an admin sees it -----------------------------------------------------------

def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--virtual-time-budget=15000", *args], capture_output=True, text=True, timeout=180)


def rows_with(html: str, cell: str) -> list[str]:
    """The table rows (`<tr>...</tr>`) of the rendered DOM that hold `cell` as a cell's whole text."""
    return [r for r in re.findall(r"<tr\b.*?</tr>", html, re.S) if re.search(rf">\s*{re.escape(cell)}\s*<", r)]


def test_the_page_shows_every_node_a_running_job_and_the_partitions_in_chromium(web, tmp_path):
    """Slurm-web's own frontend through an SSH tunnel, as an admin opens it: the UI takes the
    anonymous token, finds the cluster through the gateway and its agent, renders on its resources
    page every node slurmrestd reports and their partition, and on its jobs page a running job."""
    from components.transport import SshTarget
    from components.transport.ssh import ssh_argv

    local = web.local_port
    partition = ssh("ctl", "sinfo -h -o %R | head -1").stdout.strip()
    job = ssh("ctl", as_user(f"sbatch --parsable -p {partition} -t 10 --wrap 'sleep 600'")).stdout.strip().split(";")[0]
    argv = ssh_argv(SshTarget.from_dict(lab_conn("ctl")))
    tunnel = subprocess.Popen([*argv[:-1], "-N", "-o", "ExitOnForwardFailure=yes", "-o", "ControlPath=none",
                               "-L", f"127.0.0.1:{local}:127.0.0.1:{PORT}", argv[-1]],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ssh("ctl", f"for i in $(seq 50); do squeue -h -j {job} -o %T | grep -q RUNNING && exit 0; sleep 0.2; done; "
                   "exit 1")
        for _ in range(50):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", local)) == 0:
                    break
            time.sleep(0.2)
        # as a visitor comes: the front page (the anonymous token, the cluster list, both kept in
        # the browser's local storage), then the cluster's resources and jobs pages
        profile = f"--user-data-dir={tmp_path / 'chromium'}"
        first = chromium(profile, "--dump-dom", f"http://127.0.0.1:{local}/")
        url = f"http://127.0.0.1:{local}/{CLUSTER}/resources"
        dom = chromium(profile, "--dump-dom", url)
        jobs_url = f"http://127.0.0.1:{local}/{CLUSTER}/jobs"
        jobs = chromium(profile, "--dump-dom", jobs_url)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "page.png"
        chromium(profile, "--window-size=1400,1000", f"--screenshot={shot}", url)
        chromium(profile, "--window-size=1400,1000", f"--screenshot={ARTIFACTS / 'jobs.png'}", jobs_url)
    finally:
        tunnel.terminate()
        tunnel.wait(10)
        ssh("ctl", f"scancel {job}", check=False)
    html = dom.stdout
    assert 'id="app"' in html, html[-2000:] + dom.stderr[-2000:]
    assert "Cluster not found" not in html, first.stdout[-3000:]
    missing = [n for n in NODES if not re.search(rf">\s*{n}\s*<", html)]
    assert not missing, f"nodes {missing} not rendered:\n" + html[-4000:]
    # the page folds nodes alike into one row (node[2-3], each listed in its hidden detail row):
    # the partition badge is in the visible rows
    badges = re.findall(rf'<span[^>]*bg-gray-500[^>]*>\s*{partition}\s*</span>', html)
    assert badges, f"no node rendered in partition {partition}:\n" + html[-4000:]
    # the job's own row: its link's screen-reader text (a bare id may be another job's CPU count)
    [row] = rows_with(jobs.stdout, f"View {job}") or [""]
    assert "RUNNING" in row and re.search(rf">\s*{partition}\s*<", row), \
        f"job {job} not rendered RUNNING in {partition}:\n" + (row or jobs.stdout[-4000:])
    assert shot.stat().st_size > 10_000
    print(f"\nscreenshots: {shot}, {ARTIFACTS / 'jobs.png'}; first up with the web layer: {web.first_up_s:.1f} s")


def test_the_agent_discovered_slurmrestd_s_api_and_the_stack_output_records_it(web):
    versions = output(web, "web")["check"]["versions"]
    assert versions["slurm"] == "24.11.5" and versions["api"] in RESTD_APIS, versions
    journal = ssh("ctl", "journalctl -u slurm-web-agent.service --no-pager -o cat | grep 'Discovered slurmrestd'",
                  check=False).stdout
    assert f"API version: {versions['api']}" in journal, journal[-2000:]


def test_anonymous_sees_every_view_and_may_do_nothing_else(web):
    got = visit(*(f"GET {API}/{v}" for v in ("stats", "jobs", "nodes", "partitions", "qos", "reservations",
                                             "accounts", "associations", "cache/stats")),
                f"POST {API}/cache/reset", "GET /api/users")
    assert {k: v for k, v in got.items() if v != "200"} == {
        f"GET {API}/associations": "403", f"GET {API}/cache/stats": "403", f"POST {API}/cache/reset": "403",
        "GET /api/users": "501"}, got
    check = output(web, "web")["check"]
    assert check["clusters"] == [CLUSTER] and check["api_server"] == f"http://127.0.0.1:{web.local_port}"
    assert sorted(n["name"] for n in check["nodes"]) == sorted(NODES)


# ---- hardening, read back from the runtime -------------------------------------------------

READ = r"""
for n in slurm-web-agent slurm-web-gateway; do
  pid=$(podman inspect -f '{{.State.Pid}}' $n)
  echo "$n $(podman inspect -f '{{.ImageDigest}} {{.HostConfig.ReadonlyRootfs}}' $n) \
$(awk '/^Uid:/{u=$2} /^Gid:/{g=$2} /^CapEff:/{c=$2} /^CapBnd:/{b=$2} /^NoNewPrivs:/{n=$2} END{print u":"g, c, b, n}' /proc/$pid/status) \
$(while IFS=: read -r _ c p; do case ",$c," in *,memory,*) cat /sys/fs/cgroup/memory$p/memory.limit_in_bytes;; esac; done </proc/$pid/cgroup) \
$(while IFS=: read -r _ c p; do case ",$c," in *,pids,*) cat /sys/fs/cgroup/pids$p/pids.max;; esac; done </proc/$pid/cgroup)"
done
"""


def test_every_hardening_property_is_read_back_from_podman_and_the_kernel(web):
    seen = {}
    for line in ssh("ctl", READ).stdout.splitlines():
        name, digest, ro, user, cap_eff, cap_bnd, nnp, mem, pids = line.split()
        seen[name] = (digest, ro, user, cap_eff, cap_bnd, nnp, int(mem), int(pids))
    for comp, name in CONTAINERS.items():
        pinned = web.images[comp].rsplit("@", 1)[1]
        assert seen[name] == (pinned, "true", UID, "0" * 16, "0" * 16, "1", 256 * 2**20, 128), (name, seen[name])
    out = output(web, "web")["containers"]
    assert out["gateway"]["ports"] == [{"address": "127.0.0.1", "host_port": PORT, "container_port": 5011}]
    assert out["agent"]["ports"] == [] and out["agent"]["cpu_quota_us"] == LAB_CPUS * 100_000


def test_the_kernel_enforces_the_limits(web):
    """Not only set: a process over the pids limit cannot fork, one over the memory limit dies."""
    forks = ssh("ctl", "podman exec slurm-web-agent python3 -c '"
                "import os,time\n"
                "n=0\n"
                "try:\n"
                "  for _ in range(400):\n"
                "    if os.fork()==0: time.sleep(5); os._exit(0)\n"
                "    n+=1\n"
                "except OSError as e: print(\"refused after\", n, e.errno)\n'", check=False)
    m = re.search(r"refused after (\d+) 11", forks.stdout)
    assert m and int(m.group(1)) < 128, forks.stdout + forks.stderr
    mem = ssh("ctl", "podman exec slurm-web-agent python3 -c 'b=bytearray(400*2**20); print(len(b))'", check=False)
    assert mem.returncode == 137, (mem.returncode, mem.stdout, mem.stderr)


def test_the_port_is_loopback_only_and_the_agent_has_no_tcp_listener_on_the_host(web):
    r = ssh("node1", f"timeout 5 bash -c '</dev/tcp/{CTL}/{PORT}' 2>&1; echo rc=$?", check=False)
    assert "Connection refused" in r.stdout, r.stdout
    agent_ip = ssh("ctl", "podman inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "
                          "slurm-web-agent").stdout.split()[0]
    r = ssh("node1", f"timeout 5 bash -c '</dev/tcp/{agent_ip}/5012' 2>&1; echo rc=$?", check=False)
    assert "rc=0" not in r.stdout, r.stdout
    listen = ssh("ctl", "ss -Hltnp").stdout
    assert not re.search(r"slurmrestd|python3|slurm-web|:501[12]\b", listen), listen
    ports = [line.split()[3] for line in listen.splitlines() if line.split()[3].endswith(f":{PORT}")]
    assert all(p.startswith("127.0.0.1:") for p in ports), listen


def test_the_agent_is_internal_only_and_the_gateway_reaches_it(web):
    nets = ssh("ctl", "for n in gpu-fleet-web-internal gpu-fleet-web-ingress; do "
                      "echo $n $(podman network inspect -f '{{.Internal}}' $n); done").stdout.split()
    assert nets == ["gpu-fleet-web-internal", "true", "gpu-fleet-web-ingress", "false"]
    out = ssh("ctl", "podman exec slurm-web-agent python3 -c '"
                     "import socket\n"
                     "s=socket.socket(); s.settimeout(3)\n"
                     "try: s.connect((\"10.213.57.10\", 5000)); print(\"reached\")\n"
                     "except OSError as e: print(\"no route\", e.errno)\n'").stdout
    assert out.startswith("no route"), out
    assert visit(f"GET {API}/ping", "GET /api/version") == {f"GET {API}/ping": "200", "GET /api/version": "200"}


# ---- least privilege to Slurm --------------------------------------------------------------

# the agent's own token, used from inside the agent container straight on slurmrestd's socket
AGENT_DIRECT = r"""
import http.client, json, socket, sys
class U(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect("/run/slurmrestd/slurmrestd.socket")
tok = [l.split("=", 1)[1] for l in open("/run/secrets/slurm-web/agent.ini").read().splitlines()
       if l.startswith("jwt_token=")][0]
c = U("localhost")
c.request("DELETE", f"/slurm/{sys.argv[2]}/job/" + sys.argv[1],
          headers={"X-SLURM-USER-NAME": "slurmweb", "X-SLURM-USER-TOKEN": tok})
r = c.getresponse(); body = r.read().decode()
try:
    errors = [e.get("error") or e.get("description") for e in json.loads(body).get("errors") or []]
except ValueError:
    errors = [body[:300]]
print(r.status, json.dumps(errors))
"""


def test_writes_are_refused_by_the_gateway_and_by_slurm_and_the_job_still_runs(web):
    job = ssh("ctl", as_user("sbatch --parsable -p lab -t 10 --wrap 'sleep 600'")).stdout.strip().split(";")[0]
    try:
        ssh("ctl", f"for i in $(seq 50); do squeue -h -j {job} -o %T | grep -q RUNNING && exit 0; sleep 0.2; done; "
                   "exit 1")
        got = visit(f"DELETE {API}/job/{job}", f"POST {API}/job/{job}", f"POST {API}/jobs", f"DELETE {API}/jobs",
                    f"PUT {API}/node/node1", f"POST {API}/cache/reset", f"DELETE /slurm/{RESTD_API}/job/{job}")
        assert got and all(v in ("403", "404", "405") for v in got.values()), got
        direct = ssh("ctl", f"podman exec -i slurm-web-agent python3 - {job} {RESTD_API} <<'PY'\n{AGENT_DIRECT}\nPY",
                     check=False)
        assert direct.returncode == 0, direct.stdout + direct.stderr
        # refused where it counts: the job runs on (slurmrestd 24.11 answers such a cancel 200 with no
        # error of its own; slurmctld refuses the RPC and logs it)
        time.sleep(3)
        log = ssh("ctl", f"grep -E 'JobId={job}\\b|JobId={job}$' /var/log/slurm/slurmctld.log | tail -5",
                  check=False).stdout
        print(f"\nslurmrestd to the agent's token cancelling another user's job: {direct.stdout.strip()}\n{log}")
        assert ssh("ctl", f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING", log
        assert ssh("ctl", "sacctmgr -nP show user slurmweb format=adminlevel 2>/dev/null; true").stdout.strip() \
            in ("", "None")
    finally:
        ssh("ctl", f"scancel {job}", check=False)


# ---- the seed's two traps -----------------------------------------------------------------

TRAP = r"""
img=$(podman inspect -f '{{.Image}}' slurm-web-agent)
echo "image-owner $(podman run --rm --user 0:0 --cap-drop=all --entrypoint python3 $img -c 'import os; s=os.stat("/etc/slurm-web"); print(s.st_uid, s.st_gid, oct(s.st_mode & 0o777))')"
install -m 0400 -o root -g root /dev/null /root/single-file-secret
out=$(podman run --rm --user 64210:64210 --cap-drop=all -v /root/single-file-secret:/etc/slurm-web/token:ro \
  --entrypoint python3 $img -c 'open("/etc/slurm-web/token").read()' 2>&1 | tail -n1)
echo "single-file $out"
rm -f /root/single-file-secret
echo "layer-dir $(podman exec slurm-web-agent python3 -c 'import os; print(os.access("/run/secrets/slurm-web/agent.ini", os.R_OK), os.getuid())')"
"""


def test_the_secret_is_a_read_only_directory_the_containers_uid_reads(web):
    out = dict(line.split(" ", 1) for line in ssh("ctl", TRAP).stdout.splitlines() if " " in line)
    assert out["image-owner"] == "999 999 0o700", out
    assert "PermissionError" in out["single-file"], out  # the seed's trap, reproduced
    assert out["layer-dir"] == "True 64210", out        # the layer's mount: readable by its uid
    mounts = ssh("ctl", "podman inspect -f '{{range .Mounts}}{{.Source}}:{{.Destination}}:{{.RW}} {{end}}' "
                        "slurm-web-agent").stdout.split()
    assert sorted(mounts) == ["/etc/gpu-fleet/web/agent:/run/secrets/slurm-web:false",
                              "/run/slurmrestd:/run/slurmrestd:false"], mounts
    assert ssh("ctl", f"stat -c '%a %u %g' /etc/gpu-fleet/web/agent {AGENT_INI} /etc/gpu-fleet/web/agent/jwt.key "
                      "/etc/gpu-fleet/web/gateway/jwt.key").stdout.split("\n")[:4] == \
        ["750 0 64210", "440 0 64210", "440 0 64210", "440 0 64210"]


def test_no_token_or_signing_key_in_the_state(web):
    token = ssh("ctl", f"{TOKEN_OF} {AGENT_INI}").stdout.strip()
    key = ssh("ctl", "base64 -w0 /etc/slurm/jwt_hs256.key").stdout.strip()
    web_key = ssh("ctl", "cat /etc/gpu-fleet/web/gateway/jwt.key").stdout.strip()
    state = web.run("stack", "export", "--stack", "lab").stdout
    assert len(token) > 100 and len(web_key) == 64
    assert token not in state and key not in state and web_key not in state
    assert "jwt_hs256" not in ssh("ctl", "cat /etc/systemd/system/slurm-web-*.service /etc/gpu-fleet/web/agent.ini.in "
                                         "/etc/gpu-fleet/web/gateway/gateway.ini").stdout


# ---- token lifetime -------------------------------------------------------------------------

CLAIMS = (f"{TOKEN_OF} {AGENT_INI} | cut -d. -f2 | tr '_-' '/+' | base64 -d 2>/dev/null | tr -d '\\n'; echo; "
          f"{TOKEN_OF} {AGENT_INI} | sha256sum")


def claims() -> tuple[int, str]:
    text, sha = ssh("ctl", CLAIMS).stdout.splitlines()[:2]
    return int(re.search(r'"exp":(\d+)', text).group(1)), sha.split()[0]


#: slurmrestd asked for the nodes with the token in an agent.ini (`python3 - FILE API`): prints
#: the status and the number of errors. A /ping will not do: 24.11 answers it 200 whatever the
#: token, with slurmctld "DOWN" in the body when the token is refused.
RESTD = r"""
import http.client, json, socket, sys
class U(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect("/run/slurmrestd/slurmrestd.socket")
tok = [l.split("=", 1)[1] for l in open(sys.argv[1]).read().splitlines() if l.startswith("jwt_token=")][0]
c = U("localhost")
c.request("GET", f"/slurm/{sys.argv[2]}/nodes", headers={"X-SLURM-USER-NAME": "slurmweb", "X-SLURM-USER-TOKEN": tok})
r = c.getresponse()
body = r.read()
try:
    errors = json.loads(body).get("errors") or []
except ValueError:
    errors = [body[:200].decode(errors="replace")]
print(r.status, len(errors), json.dumps(errors)[:400])
"""


def served(answer: str) -> bool:
    """slurmrestd's answer (RESTD's line) served the nodes: 200 and no error."""
    return answer.split()[:2] == ["200", "0"]


def test_the_token_is_renewed_before_it_expires_and_an_expired_one_is_refused(web):
    """Lifetime 60 s (the least the layer takes), renewed 45 s before it expires (every 15 s,
    restarting the agent and the gateway); an expired token (the layer's own mint script, 2 s
    lifetime) is refused by Slurm, and in the agent's settings it makes the view fail closed (the
    agent will not start) until the next renewal brings both back."""
    setc(web, "web.token_lifetime_s", "60")
    setc(web, "web.renew_before_s", "45")
    ping = lambda f: ssh("ctl", f"python3 - {f} {RESTD_API} <<'PY'\n{RESTD}\nPY").stdout.strip()  # noqa: E731
    nodes = lambda: visit(f"GET {API}/nodes")[f"GET {API}/nodes"]  # noqa: E731
    mint = "/usr/local/libexec/gpu-fleet/web-token.sh"
    try:
        up(web)
        exp0, sha0 = claims()
        assert 40 <= exp0 - int(time.time()) <= 62
        # a token of 2 s, minted aside while the timer's renewal is awaited (it is expired by then)
        ssh("ctl", f"mkdir -p /root/short && {mint} slurmweb 2 /etc/gpu-fleet/web/agent.ini.in "
                   "/root/short/agent.ini 64210 /run/gpu-fleet-web.lock")
        minted = time.monotonic()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and claims()[1] == sha0:
            time.sleep(1)
        exp1, sha1 = claims()
        assert sha1 != sha0 and exp1 > exp0, "the timer did not renew the token within 30 s"
        assert served(ping(AGENT_INI)), ping(AGENT_INI)
        # the renewal's restarts done (the view serving again is shown at the end, after the
        # same unit's run by hand); the expired token stays until we renew
        ssh("ctl", "systemctl stop gpu-fleet-web-token.timer; "
                   "while [ \"$(systemctl show -p ActiveState --value gpu-fleet-web-token.service)\" = activating ]; "
                   "do sleep 0.2; done")
        time.sleep(max(0.0, minted + 4 - time.monotonic()))
        old = ping("/root/short/agent.ini")
        assert not served(old), old
        # Slurm-web's agent refuses to start on an expired token ("Configuration error: Invalid
        # slurmrestd JWT: Token is expired"): the gateway answers no view until the next renewal
        # restarts both (a gateway restarted meanwhile would wait for its agent, 60 s, and fail)
        since = ssh("ctl", "date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
        ssh("ctl", f"install -m 0440 -o root -g 64210 /root/short/agent.ini {AGENT_INI} && "
                   "systemctl restart slurm-web-agent.service", check=False)
        agent_log = lambda: ssh("ctl", f"journalctl -u slurm-web-agent.service --since '{since}' "  # noqa: E731
                                       "--no-pager -o cat").stdout
        assert wait_for(lambda: "Token is expired" in agent_log(), 60), agent_log()[-2000:]
        assert nodes() != "200"
        ssh("ctl", "systemctl start gpu-fleet-web-token.service")
        assert served(ping(AGENT_INI)), ping(AGENT_INI)
        assert wait_for(lambda: nodes() == "200", 60), nodes()
    finally:
        ssh("ctl", "rm -rf /root/short; systemctl start gpu-fleet-web-token.timer", check=False)
        web.run("config", "rm", "--path", "gpu-fleet:web.token_lifetime_s", "--stack", "lab")
        web.run("config", "rm", "--path", "gpu-fleet:web.renew_before_s", "--stack", "lab")


# ---- the reapply race -----------------------------------------------------------------------

HAMMER = ("nohup bash -c 'end=$((SECONDS+90)); while [ $SECONDS -lt $end ] && [ ! -e /root/stop-hammer ]; do "
          "systemctl start gpu-fleet-web-health.service; sleep 0.3; done' >/dev/null 2>&1 & echo $!")


def test_a_reapply_while_the_watchdog_fires_converges(web):
    """The watchdog fires every 2 s (the fixture's setting) and is started in a loop besides; a
    reapply that recreates both containers (a new memory limit) pauses it, waits, locks: no
    half-recreated container."""
    since = ssh("ctl", "date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
    pid = ssh("ctl", "rm -f /root/stop-hammer; " + HAMMER).stdout.strip()
    try:
        setc(web, "web.limits.memory_mb", "192")
        up(web)
    finally:
        ssh("ctl", f"touch /root/stop-hammer; while kill -0 {pid} 2>/dev/null; do sleep 0.2; done", check=False)
    journal = ssh("ctl", f"journalctl -u gpu-fleet-web-health.service --since '{since}' --no-pager -o cat").stdout
    assert "a reapply holds /run/gpu-fleet-web.lock" in journal, journal[-3000:]
    ps = ssh("ctl", "for n in $(podman ps -a --format '{{.Names}}'); do "
                    "echo $n $(podman inspect -f '{{.State.Status}}' $n); done").stdout.split("\n")
    assert sorted(filter(None, ps)) == ["slurm-web-agent running", "slurm-web-gateway running"], ps
    for name in CONTAINERS.values():
        assert ssh("ctl", f"pid=$(podman inspect -f '{{{{.State.Pid}}}}' {name}); "
                          f"p=$(awk -F: '/memory/{{print $3}}' /proc/$pid/cgroup); "
                          "cat /sys/fs/cgroup/memory$p/memory.limit_in_bytes").stdout.strip() == str(192 * 2**20)
    assert ssh("ctl", "systemctl is-active gpu-fleet-web-health.timer slurm-web-agent slurm-web-gateway").stdout.split() \
        == ["active"] * 3
    failed = ssh("ctl", "systemctl list-units --failed --no-legend --plain").stdout.strip()
    assert not failed, failed + "\n" + ssh("ctl", f"journalctl -u gpu-fleet-web-health.service --since '{since}' "
                                                  "--no-pager -o cat | tail -20", check=False).stdout


# ---- the tailnet exposure: a change of its own ----------------------------------------------

TAILNET_IP = "100.64.0.11"
# TEST DOUBLE of tailscaled's interface (no tailscale here, no dummy module in the hosts): a
# veth end named tailscale0 holding the controller's tailnet address; node1 routes to it
# through the controller's LAN address, as a tailnet peer would reach it through the tunnel.
TAILNET_UP = (f"ip link show tailscale0 >/dev/null 2>&1 || {{ ip link add tailscale0 type veth peer name ts-peer && "
              f"ip addr add {TAILNET_IP}/32 dev tailscale0 && ip link set tailscale0 up && ip link set ts-peer up; }}")
TAILNET_DOWN = "ip link del tailscale0 2>/dev/null; true"


def reach(host: str, address: str, port: int) -> str:
    return ssh(host, f"timeout 5 bash -c '</dev/tcp/{address}/{port}' 2>&1 && echo open || true", check=False).stdout


def test_the_tailnet_exposure_is_its_own_change_with_a_baseline_and_a_rollback(web):
    base = "/var/lib/gpu-fleet/web/tailnet/tn-1"
    ssh("ctl", TAILNET_UP)
    ssh("node1", f"ip route replace {TAILNET_IP}/32 via {CTL}")
    try:
        setc(web, "web.tailnet.address", TAILNET_IP)
        setc(web, "web.tailnet.change_id", "tn-1")
        up(web)
        assert "open" in reach("node1", TAILNET_IP, PORT)
        assert "Connection refused" in reach("node1", CTL, PORT)
        for port in (5012, 6820):  # the agent and slurmrestd: nothing on the tailnet either
            assert "open" not in reach("node1", TAILNET_IP, port)
        page = ssh("node1", f"python3 -c 'import urllib.request as u; print(u.urlopen(\"http://{TAILNET_IP}:{PORT}/"
                            "api/version\").status)'").stdout.strip()
        assert page == "200"
        baseline = json.loads(ssh("ctl", f"cat {base}/baseline.json").stdout)
        assert baseline["published"] == {"5011/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8080"}]}, baseline
        assert ssh("ctl", f"stat -c %a {base}/baseline.json; test -e {base}/exposed && echo marker").stdout.split() \
            == ["444", "marker"]
        assert output(web, "web")["tailnet"]["states"][TAILNET_IP]["state"] == "open"
        # rollback of this change only: the section removed
        web.run("config", "rm", "--path", "gpu-fleet:web.tailnet", "--stack", "lab")
        up(web)
        assert "open" not in reach("node1", TAILNET_IP, PORT)
        assert ssh("ctl", f"test -e {base}/exposed && echo marker; test -e {base}/baseline.json && echo baseline"
                   ).stdout.split() == ["baseline"]
        assert ssh("ctl", f"python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:{PORT}/\")"
                          ".status)'").stdout.strip() == "200"
    finally:
        web.run("config", "rm", "--path", "gpu-fleet:web.tailnet", "--stack", "lab", check=False)
        ssh("node1", f"ip route del {TAILNET_IP}/32 2>/dev/null; true", check=False)
        ssh("ctl", TAILNET_DOWN, check=False)


def test_a_second_up_changes_nothing(web):
    # (`up`, not `preview`: a preview shows the accounting layer's ClusterIdAdoption as an update
    # whenever no history was restored, an output the engine dropped as None reads as unknown)
    p = web.run("up", "--yes", "--expect-no-changes", "--stack", "lab", check=False, timeout=600)
    assert p.returncode == 0, p.stdout[:3000]


# ---- rollback -------------------------------------------------------------------------------

GONE = r"""
echo "units $(ls /etc/systemd/system | grep -E 'slurm-web|gpu-fleet-web' | tr '\n' ' ')"
echo "containers $(podman ps -aq | wc -l)"
echo "networks $(podman network ls --format '{{.Name}}' | grep -c gpu-fleet-web)"
echo "images $(podman images -q | wc -l)"
echo "user $(getent passwd slurmweb | cut -d: -f1)"
echo "token $(ls /etc/gpu-fleet/web 2>/dev/null | tr '\n' ' ')"
echo "slurm $(systemctl is-active slurmctld slurmdbd slurmrestd | tr '\n' ' ')"
"""


def test_rollback_leaves_slurm_serving_and_a_second_up_brings_the_same_digests(web):
    setc(web, "web.enabled", "false")
    up(web)
    left = {k: v.strip() for k, _, v in (line.partition(" ") for line in ssh("ctl", GONE).stdout.splitlines())}
    assert left == {"units": "", "containers": "0", "networks": "0", "images": "0", "user": "", "token": "",
                    "slurm": "active active active"}, left
    assert set(ssh("ctl", as_user("sinfo -h -N -o %N")).stdout.split()) == set(NODES)
    setc(web, "web.enabled", "true")
    up(web)
    out = output(web, "web")["containers"]
    assert {c: out[c]["image_digest"] for c in CONTAINERS} == \
        {c: web.images[c].rsplit("@", 1)[1] for c in CONTAINERS}
