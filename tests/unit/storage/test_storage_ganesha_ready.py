"""nfs-ganesha.service's ExecStartPost (components/layers/storage/scripts/ganesha_ready.sh): the
start ends once ganesha answers on D-Bus, not when its process forks. The script runs for real;
`dbus-send` on its PATH is a double that answers after a given number of calls (the lab
test_storage runs it against the real ganesha)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from components.scripts import script_path
from components.layers.storage import component

READY = script_path(component.__file__, "ganesha_ready.sh")


def _run(tmp_path: Path, answer_after: int, limit: int) -> tuple[subprocess.CompletedProcess, int, float]:
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "dbus-send"
    fake.parent.mkdir()
    fake.write_text(f"""#!/bin/sh
echo x >> {calls}
[ "$(wc -l < {calls})" -gt {answer_after} ] && exit 0
echo "Error org.freedesktop.DBus.Error.ServiceUnknown: The name org.ganesha.nfsd was not provided" >&2
exit 1
""")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    t0 = time.monotonic()
    p = subprocess.run(["sh", str(READY), str(limit)], env=env, capture_output=True, text=True, timeout=30)
    n = len(calls.read_text().splitlines()) if calls.exists() else 0
    return p, n, time.monotonic() - t0


def test_the_start_waits_until_ganesha_answers(tmp_path):
    p, calls, took = _run(tmp_path, answer_after=5, limit=10)
    assert p.returncode == 0, p.stderr
    assert calls == 6 and took < 5


def test_a_ganesha_that_never_answers_fails_the_start_and_says_why(tmp_path):
    # 2 s: the script counts whole seconds, so a 1 s limit can end after one call (CI did)
    p, calls, took = _run(tmp_path, answer_after=10**6, limit=2)
    assert p.returncode == 1
    assert "ganesha did not answer on D-Bus within 2 s" in p.stderr and "ServiceUnknown" in p.stderr
    assert calls > 1 and took < 6
