#!/bin/sh
# Lists listening TCP sockets, then pings slurmrestd on its socket with a token minted here.
# $1 slurmrestd's unix socket, $2 the user the token is for. Prints "== listen"/"== restd" sections.

sock="$1"; user="$2"
echo "== listen"
ss -Hltnp 2>/dev/null | awk '{print $4, $6}'
echo "== restd"
tok=$(runuser -u "$user" -- scontrol token lifespan=60 2>/dev/null | sed -n 's/^SLURM_JWT=//p')
if [ -z "$tok" ]; then echo "status notoken"; exit 0; fi
code=$(SOCK="$sock" RUSER="$user" TOK="$tok" python3 -c '
import os, socket
for v in ("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42"):  # 22.05 serves up to .38, 24.11 from .40
    s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(os.environ["SOCK"])
    s.sendall(("GET /slurm/%s/ping HTTP/1.0\r\nX-SLURM-USER-NAME: %s\r\nX-SLURM-USER-TOKEN: %s\r\n\r\n"
               % (v, os.environ["RUSER"], os.environ["TOK"])).encode())
    code = s.recv(64).split(b" ")[1].decode()
    if code != "404":
        break
print(code)' 2>&1 | tail -n1)
echo "status $code"
