#!/bin/bash
# Read-only, on the controller: Slurm-web as a visitor sees it, through the gateway on loopback.
# $1 the gateway's port, $2 the declared tailnet address (or empty; the tailnet change checks it),
# $3 the cluster's name. Sections: `page` (the UI's index and the script it loads), `config` (the
# API address the UI is given), `http` (status of each call: the anonymous token, each agent view,
# the actions anonymous must be refused, write methods), `clusters`, `nodes` and `versions` (JSON,
# as the gateway answers; `versions`: the Slurm release and slurmrestd API its agent discovered),
# `lan` (the port on each of the host's other addresses: it must be refused), `listen` (TCP
# listeners and their processes).
set -uo pipefail
port=$1 tailnet=${2:-} cluster=$3
PORT=$port TAILNET=$tailnet CLUSTER=$cluster python3 - <<'PY'
import http.client, json, os, re, socket, subprocess, time
port, cluster = int(os.environ["PORT"]), os.environ["CLUSTER"]
def req(method, path, token=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        # a write carries a JSON body, as the UI sends it (without one Flask answers 415 first)
        body = None if method == "GET" else "{}"
        headers = {"Content-Type": "application/json"} if body else {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    except OSError as e:
        return type(e).__name__, b""
    finally:
        c.close()
def body_json(data, default):
    try:
        return json.loads(data)
    except ValueError:
        return default
# the unit is started once its container runs; Slurm-web's server answers a few seconds later
for _ in range(60):
    status, index = req("GET", "/")
    if isinstance(status, int):
        break
    time.sleep(1)
print("== page")
print("index", status)
m = re.search(r'src="([^"]*/assets/index-[^"]+\.js)"', index.decode(errors="replace"))
print("app", 'id="app"' in index.decode(errors="replace"))
if m:
    print("asset", m.group(1), req("GET", m.group(1))[0])
print("== config")
print(body_json(req("GET", "/config.json")[1], {}).get("API_SERVER", ""))
print("== http")
status, data = req("GET", "/api/anonymous")
print("GET /api/anonymous", status)
token = body_json(data, {}).get("token")
calls = [("GET", "/api/version"), ("GET", "/api/clusters"), ("GET", f"/api/agents/{cluster}/ping")]
calls += [("GET", f"/api/agents/{cluster}/{v}") for v in
          ("stats", "jobs", "nodes", "partitions", "qos", "reservations", "accounts", "associations", "cache/stats")]
calls += [("POST", f"/api/agents/{cluster}/cache/reset"), ("POST", f"/api/agents/{cluster}/jobs"),
          ("DELETE", f"/api/agents/{cluster}/jobs"), ("PUT", f"/api/agents/{cluster}/nodes"),
          ("PATCH", f"/api/agents/{cluster}/partitions"), ("GET", "/api/users")]
body = {}
for m, p in calls:
    status, data = req(m, p, token)
    body[(m, p)] = data
    print(m, p, status)
print("== clusters")
print(json.dumps(body_json(body[("GET", "/api/clusters")], [])))
print("== nodes")
print(json.dumps(body_json(body[("GET", f"/api/agents/{cluster}/nodes")], [])))
print("== versions")
print(json.dumps(body_json(body[("GET", f"/api/agents/{cluster}/ping")], {}).get("versions", {})))
print("== lan")
addrs = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout.split("\n")
for line in addrs:
    f = line.split()
    if len(f) > 3 and f[2] == "inet" and not f[3].startswith("127.") and not f[1].startswith(("podman", "veth")):
        a = f[3].split("/")[0]
        if a == os.environ["TAILNET"]:
            continue
        s = socket.socket()
        s.settimeout(3)
        try:
            s.connect((a, port))
            print(a, "open")
        except OSError as e:
            print(a, type(e).__name__)
        finally:
            s.close()
PY
echo "== listen"
ss -Hltnp 2>/dev/null | awk '{print $4, $6}'
