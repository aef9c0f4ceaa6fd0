#!/bin/bash
# Read-only, on the controller: the web view as a client sees it. $1 the gateway's port on
# loopback, $2 the declared tailnet address (or empty; the tailnet change checks it). Sections: `http` (status of the page, each read API, and of write methods that
# must be refused), `nodes` (the agent's node list through the gateway), `lan` (the port on
# each of the host's other addresses: it must be refused), `listen` (TCP listeners and their
# processes).
set -uo pipefail
port=$1 tailnet=${2:-}
PORT=$port TAILNET=$tailnet python3 - <<'PY'
import http.client, json, os, socket, subprocess
port = int(os.environ["PORT"])
def req(method, path, host="127.0.0.1"):
    c = http.client.HTTPConnection(host, port, timeout=10)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, r.read()
    except OSError as e:
        return type(e).__name__, b""
    finally:
        c.close()
print("== http")
body = {}
for m, p in [("GET", "/"), ("GET", "/api/nodes"), ("GET", "/api/partitions"), ("GET", "/api/jobs"),
             ("POST", "/api/jobs"), ("DELETE", "/api/jobs/1"), ("PUT", "/api/nodes"), ("PATCH", "/api/nodes")]:
    status, data = req(m, p)
    body[(m, p)] = data
    print(m, p, status)
print("== page")
print("has-nodes-table", 'id="nodes"' in body[("GET", "/")].decode(errors="replace"))
print("== nodes")
try:
    print(json.dumps(json.loads(body[("GET", "/api/nodes")])))
except ValueError:
    print("{}")
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
