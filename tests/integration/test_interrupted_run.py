"""An interrupted `pulumi up` with the real CLI: the provider process stops its host commands.

The program declares the real CommandWithVerify primitive on two "hosts" that are a local
shell behind a fake ssh written by the test (a TEST DOUBLE of the network hop only). Each
create is a long step (it holds while a file exists, as an `apt-get install` takes minutes);
the tests interrupt the run while both are in flight:

- `kill -9` of the `pulumi` process: the provider process notices, ends the commands, starts
  no other, and exits within seconds; the lock and the pending creates the killed run left are
  cleared with the documented commands, then `up` converges and a preview has nothing to do;
- SIGINT to `pulumi` (Ctrl-C): the engine sends Cancel; the commands end within 5 s, the run
  fails saying so, and the next `up` converges.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.procs import processes, providers_of, wait_for

from .programs import program_project

STACK = "t"
HOSTS = ("node1", "node2")

PROGRAM = '''
import pulumi
from components.providers import CommandWithVerify
from components.transport import SshTarget

root = pulumi.Config("gpu-fleet").require("root")
for i, name in enumerate({hosts!r}):
    d = f"{{root}}/{{name}}"
    conn = SshTarget(name, f"127.0.0.{{i + 1}}", use_ssh_config=False).as_dict()
    # a long step while `hold` exists (each host's pid in `started`), then its effect: `done`
    CommandWithVerify(f"{{name}}-install", conn=conn,
                      create=["sh", "-c", 'mkdir -p "$1"; echo $$ > "$1/started"; '
                              'while [ -e "$2" ]; do sleep 0.2; done; touch "$1/done"',
                              "sh", d, f"{{root}}/hold"],
                      verify=["test", "-e", f"{{d}}/done"], delete=["rm", "-f", f"{{d}}/done"])
'''

class Run:
    def __init__(self, tmp: Path):
        self.proj = program_project(tmp, PROGRAM.format(hosts=HOSTS))
        self.root, self.log = tmp / "hosts", tmp / "commands.jsonl"
        self.root.mkdir()
        self.proj.env.update(GPU_FLEET_COMMAND_LOG=str(self.log))
        self.proj.write_stack(STACK, f"config:\n  gpu-fleet:root: {self.root}\n")
        self.proj.init_stack(STACK, secrets=False)

    def start_up(self) -> subprocess.Popen:
        (self.root / "hold").touch()
        return subprocess.Popen(["pulumi", "up", "--stack", STACK, "--yes", "--skip-preview", "--non-interactive"],
                                cwd=self.proj.dir, env=self.proj.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def started(self) -> dict[str, int]:
        return {h: int((self.root / h / "started").read_text()) for h in HOSTS
                if (self.root / h / "started").exists() and (self.root / h / "started").read_text().strip()}

    def commands(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def state(self) -> dict:
        return json.loads(self.proj.run("stack", "export", "--stack", STACK).stdout)["deployment"]

    def interrupt(self, sig: int) -> tuple[subprocess.Popen, int, dict[str, int], float]:
        """`pulumi up`, and `sig` to it once both creates run on their hosts: the run, its
        provider process, the hosts' command pids and when the signal was sent."""
        up = self.start_up()
        try:
            wait_for(lambda: len(self.started()) == 2, 120, "both creates running")
            provider, remote = provider_of(up.pid), self.started()
            sent = time.monotonic()
            os.kill(up.pid, sig)
        except BaseException:
            up.kill()
            raise
        return up, provider, remote, sent

    def converges(self) -> None:
        (self.root / "hold").unlink(missing_ok=True)
        out = self.proj.run("up", "--stack", STACK, "--yes", "--skip-preview").stdout
        assert "2 created" in out, out
        assert all((self.root / h / "done").exists() for h in HOSTS)
        self.proj.run("preview", "--stack", STACK, "--expect-no-changes")


def provider_of(pulumi_pid: int) -> int:
    kids = providers_of(pulumi_pid)
    assert len(kids) == 1, kids
    return kids[0]


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


@pytest.fixture
def run(tmp_path):
    r = Run(tmp_path)
    yield r
    (r.root / "hold").unlink(missing_ok=True)
    # whatever the interrupted run left (language host, program): named in its command line, or
    # running in the project (the language host's adapter, which kill -9 of the CLI leaves behind)
    for pid, (_, cmd) in processes().items():
        if str(r.proj.dir) in cmd or str(tmp_path) in cmd or _cwd(pid).startswith(str(tmp_path)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_kill_9_of_pulumi_stops_the_provider_and_the_next_up_converges(run, capsys):
    up, provider, remote, killed = run.interrupt(signal.SIGKILL)
    try:
        up.wait()
        gone = wait_for(lambda: provider not in processes(), 10, "the provider process exits")
        assert not any(pid in processes() for pid in remote.values()), "a host command outlived the provider"
        count = run.commands()
        time.sleep(2)
        assert run.commands() == count, "commands went on after the provider stopped"
        assert not any((run.root / h / "done").exists() for h in HOSTS)
    finally:
        if up.poll() is None:
            up.kill()

    # what the killed run left: its lock, and both creates pending
    p = run.proj.run("up", "--stack", STACK, "--yes", "--skip-preview", check=False)
    assert p.returncode != 0 and "locked" in (p.stdout + p.stderr), p.stdout + p.stderr
    run.proj.run("cancel", "--stack", STACK, "--yes")
    pending = [op["type"] for op in run.state().get("pending_operations") or []]
    assert pending == ["creating", "creating"], pending
    # the documented way out of pending creates (the engine refuses to guess whether they happened)
    run.proj.run("refresh", "--stack", STACK, "--clear-pending-creates", "--yes", "--skip-preview")
    assert not run.state().get("pending_operations")
    run.converges()
    with capsys.disabled():
        print(f"\n  kill -9 of pulumi: provider gone {gone:.1f} s later, its host commands with it")


def test_ctrl_c_stops_the_commands_within_5_s_and_the_next_up_converges(run, capsys):
    up, provider, remote, sent = run.interrupt(signal.SIGINT)  # what Ctrl-C in a terminal sends
    try:
        stopped = wait_for(lambda: not any(pid in processes() for pid in remote.values()), 5,
                           "host commands end after Ctrl-C")
        text, _ = up.communicate(timeout=60)
        ended = time.monotonic() - sent
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode != 0
    assert "stopped after" in text and "the run was cancelled" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    wait_for(lambda: provider not in processes(), 10, "the provider process exits with the run")
    assert not any((run.root / h / "done").exists() for h in HOSTS)
    assert not run.state().get("pending_operations")  # a cancelled run records its failures
    run.converges()
    with capsys.disabled():
        print(f"\n  Ctrl-C: host commands ended {stopped:.2f} s after SIGINT, pulumi exited after {ended:.1f} s")
