"""Run the hub double as its own process:

    python -m tests.doubles.hub --root DIR [--bind 127.0.0.1] [--port 0] [--log F]
        [--token-file F] [--pid-file F] [--rate-mbps MB/s] [--cut-after-bytes N]

Prints its URL on one line once it listens; SIGTERM or SIGINT stops it (exit 0)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from .server import HubDouble


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.doubles.hub", description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="<root>/<org>/<name>/<commit>/... and .../refs/<branch>")
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port (the printed URL says which)")
    ap.add_argument("--log", help="append one JSON line per request")
    ap.add_argument("--token-file", help="require 'Authorization: Bearer <the file's content>'")
    ap.add_argument("--pid-file")
    ap.add_argument("--rate-mbps", type=float, help="cap each response at this many MB/s (10^6 bytes)")
    ap.add_argument("--cut-after-bytes", type=int, help="drop the first whole-file GET of each larger file after N bytes")
    a = ap.parse_args(argv)
    if not Path(a.root).is_dir():
        ap.error(f"--root {a.root}: not a directory")
    token = Path(a.token_file).read_text().strip() if a.token_file else None
    if a.token_file and not token:
        ap.error(f"--token-file {a.token_file}: empty")
    hub = HubDouble(a.root, host=a.bind, port=a.port, log=a.log, token=token,
                    rate_mbps=a.rate_mbps, cut_after=a.cut_after_bytes)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    hub.start()
    if a.pid_file:
        Path(a.pid_file).write_text(f"{os.getpid()}\n")
    print(hub.url, flush=True)
    try:
        while not stop.wait(3600):
            pass
    finally:
        hub.stop()
        if a.pid_file:
            Path(a.pid_file).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
