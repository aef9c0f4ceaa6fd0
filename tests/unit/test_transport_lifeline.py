"""The run stops, the provider's host commands stop (issue 17, part 3), without the engine.

- The engine dies (`kill -9 pulumi`): a child process that runs a long command through the
  real transport (a local shell where ssh would be) loses its parent; within seconds the
  command is ended, a new mutating command is refused, and the process exits.
- The engine cancels (Ctrl-C): the SDK's own servicer class, registered with a real gRPC server
  before the hook is installed (as in the provider process), gets `Cancel` over gRPC; the
  command in flight ends within 5 s, a new mutating command is refused, read-only ones run.
"""

from __future__ import annotations

import ast
import importlib.machinery
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2

from components.transport import Connection, RunStopped, SshTarget, lifeline, ssh

from tests.procs import wait_for

from .fakeconn import LOCAL_SHELL

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_run():
    lifeline._reset_for_tests()
    yield
    lifeline._reset_for_tests()


def local_shell(monkeypatch):
    monkeypatch.setattr(ssh, "ssh_argv", lambda t: ["/bin/sh", "-c", LOCAL_SHELL, f"fake-ssh-{t.name}"])
    return Connection(SshTarget("node1", "10.0.0.1"))


def alive(pid: int) -> bool:
    return lifeline._proc(pid) is not None  # a zombie nobody reaps counts as gone


def long_command(marker: Path, seconds: int = 60) -> list[str]:
    """A command that says it started (with the pid of the process that then sleeps)."""
    return ["sh", "-c", f'echo $$ > {marker}.tmp && mv {marker}.tmp {marker} && exec sleep {seconds}']


# ---- in one process ---------------------------------------------------------------------

def test_stop_ends_the_command_in_flight_and_refuses_new_mutating_ones(monkeypatch, tmp_path):
    c = local_shell(monkeypatch)
    marker, out = tmp_path / "started", {}

    def run():
        start = time.monotonic()
        try:
            c.run(long_command(marker), mutating=True)
        except RunStopped as e:
            out["error"], out["took"] = e, time.monotonic() - start

    th = threading.Thread(target=run)
    th.start()
    wait_for(marker.exists, 10, "the long command starts")
    sleeper = int(marker.read_text())
    assert lifeline.stop(lifeline.CANCELLED) == 1
    th.join(5)
    assert not th.is_alive() and "error" in out
    assert str(out["error"]).startswith("host node1: `sh -c ")
    assert "stopped after" in str(out["error"]) and "the run was cancelled" in str(out["error"])
    wait_for(lambda: not alive(sleeper), 3, "the command's own process ends")  # the local shell's child too

    with pytest.raises(RunStopped) as e:
        c.run(["touch", str(tmp_path / "after")], mutating=True)
    assert str(e.value) == f"host node1: `touch {tmp_path / 'after'}` not started: {lifeline.CANCELLED}"
    assert not (tmp_path / "after").exists()
    assert c.run(["echo", "read-only"], mutating=False).stdout == "read-only\n"


def test_timeouts_and_masking_are_as_before(monkeypatch):
    from components.transport import HostError, Secret

    c = local_shell(monkeypatch)
    start = time.monotonic()
    with pytest.raises(HostError) as e:
        c.run(["sh", "-c", "echo partial; sleep 30"], mutating=False, timeout=1)
    assert time.monotonic() - start < 5
    assert "timed out after 1 s" in str(e.value) and "partial" in str(e.value)
    res = c.run(["sh", "-c", 'cat; echo "$1"', "sh", Secret("hunter2-xyz")], mutating=True,
                stdin=b"payload-abc\n", stdin_secret=True)
    assert "hunter2-xyz" not in res.stdout and "payload-abc" not in res.stdout and res.rc == 0
    assert lifeline._inflight == {}  # every command forgotten once it ended


def test_install_does_nothing_outside_the_provider_process():
    assert lifeline.install() is False
    assert lifeline._watcher is None and lifeline.stopped() is None


# ---- the engine dies --------------------------------------------------------------------

CHILD = """
import json, sys, threading, time
sys.path.insert(0, {root!r})
from components.transport import Connection, SshTarget, lifeline, ssh
LOCAL_SHELL = {shell!r}
ssh.ssh_argv = lambda t: ["/bin/sh", "-c", LOCAL_SHELL, "fake-ssh"]
report = open({report!r}, "a", buffering=1)
def say(**kw):
    report.write(json.dumps({{**kw, "t": time.time()}}) + "\\n")
assert lifeline.watch()  # in the provider process: lifeline.install() at import does this
c = Connection(SshTarget("node1", "10.0.0.1"))
def work():
    try:
        c.run({command!r}, mutating=True)
        say(what="long", result="finished")
    except Exception as e:
        say(what="long", result=type(e).__name__, error=str(e))
    try:
        c.run(["touch", {after!r}], mutating=True)
        say(what="new", result="ran")
    except Exception as e:
        say(what="new", result=type(e).__name__, error=str(e))
threading.Thread(target=work).start()
time.sleep(120)
say(what="exit", result="not stopped")
"""

# The engine stand-in: starts the provider and waits. Through `shim`, the provider is started by
# a shell that does not exec it (the official release's plugin shim: its parent stays alive).
PARENT = """
import subprocess, sys, time
argv = [sys.executable, {child!r}]
if {shim!r}:
    argv = ["/bin/sh", "-c", '"$@"; exit $?', "shim", *argv]
p = subprocess.Popen(argv)
print(p.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("shim", [False, True], ids=["provider-exec", "provider-under-shell-shim"])
def test_engine_killed_stops_commands_refuses_new_ones_and_exits(tmp_path, shim, capsys):
    marker, report, after = tmp_path / "started", tmp_path / "report.jsonl", tmp_path / "after"
    child = tmp_path / "provider.py"
    child.write_text(CHILD.format(root=str(ROOT), shell=LOCAL_SHELL, report=str(report),
                                  command=long_command(marker), after=str(after)))
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(child=str(child), shim=shim)],
                              stdout=subprocess.PIPE, text=True)
    try:
        first = int(parent.stdout.readline())
        wait_for(marker.exists, 20, "the long command starts")
        sleeper = int(marker.read_text())
        provider = next(p for p in [first, *[d for d, _ in lifeline._descendants(first)]]
                        if lifeline._proc(p) and lifeline._proc(p).comm.startswith("python"))
        killed = time.monotonic()
        parent.send_signal(signal.SIGKILL)  # kill -9 of the engine
        parent.wait()

        def events():
            return [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []

        stopped_in = wait_for(lambda: any(e["what"] == "new" for e in events()), 6, "the provider stops its commands")
        gone_in = wait_for(lambda: not alive(provider), 8, "the provider process exits") + stopped_in
        sleeper_gone = not alive(sleeper)
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in (locals().get("provider"), locals().get("sleeper")):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
    ev = {e["what"]: e for e in events()}
    assert ev["long"]["result"] == "RunStopped" and lifeline.ENGINE_GONE in ev["long"]["error"]
    assert ev["new"]["result"] == "RunStopped"
    assert ev["new"]["error"] == f"host node1: `touch {after}` not started: {lifeline.ENGINE_GONE}"
    assert not after.exists() and "exit" not in ev
    assert sleeper_gone
    assert stopped_in < 3 and gone_in < 6, (stopped_in, gone_in)
    with capsys.disabled():
        print(f"\n  engine killed ({'shell shim' if shim else 'exec'}): command stopped and new one refused "
              f"after {stopped_in:.2f} s, provider exited after {gone_in:.2f} s "
              f"(since the kill: {time.monotonic() - killed:.2f} s)")


def test_the_engines_own_parent_dying_changes_nothing(tmp_path):
    """`nohup pulumi up` and the terminal closes, or `make` is killed: pulumi still runs and
    records, so its provider goes on."""
    marker, report, after = tmp_path / "started", tmp_path / "report.jsonl", tmp_path / "after"
    child = tmp_path / "provider.py"
    child.write_text(CHILD.format(root=str(ROOT), shell=LOCAL_SHELL, report=str(report),
                                  command=long_command(marker, 5), after=str(after)))
    engine = PARENT.format(child=str(child), shim=False)
    outer = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                              f"subprocess.Popen([sys.executable, '-c', {engine!r}]); time.sleep(600)"],
                             stdout=subprocess.PIPE, text=True)
    provider = int(outer.stdout.readline())
    engine_pid = lifeline._proc(provider).ppid
    try:
        wait_for(marker.exists, 20, "the long command starts")
        outer.kill()  # the engine's parent
        outer.wait()
        wait_for(lambda: report.exists() and len(report.read_text().splitlines()) == 2, 10, "both commands end")
        ev = {e["what"]: e for e in map(json.loads, report.read_text().splitlines())}
        assert ev["long"]["result"] == "finished" and ev["new"]["result"] == "ran"  # nothing stopped
        assert after.exists() and alive(provider)
    finally:
        for pid in (engine_pid, provider):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


# ---- the engine cancels: through the SDK's own servicer ----------------------------------

def sdk_provider_main() -> types.ModuleType:
    """The SDK's `pulumi/dynamic/__main__.py` as the provider process has it, but without its
    last statement (`main()`, which would serve forever): its own servicer class, imports and
    globals, in a module whose spec is the provider process's."""
    import pulumi.dynamic

    path = Path(pulumi.dynamic.__file__).parent / "__main__.py"
    tree = ast.parse(path.read_text())
    last = tree.body[-1]
    assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and last.value.func.id == "main"
    tree.body.pop()
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.machinery.ModuleSpec(lifeline.PROVIDER_MAIN, None)
    exec(compile(tree, str(path), "exec"), main.__dict__)
    return main


def test_cancel_over_grpc_stops_the_command_in_flight(monkeypatch, tmp_path, capsys):
    from pulumi.runtime.proto import provider_pb2_grpc

    main = sdk_provider_main()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    # registered before our modules hook anything, as the SDK's main() does
    provider_pb2_grpc.add_ResourceProviderServicer_to_server(main.DynamicResourceProviderServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.setattr(lifeline, "watch", lambda **kw: False)  # no watchdog in the test process
        assert lifeline.install(main) is True
        assert lifeline.install_cancel(main) is True  # twice is harmless

        c = local_shell(monkeypatch)
        marker, out = tmp_path / "started", {}

        def run():
            try:
                c.run(long_command(marker), mutating=True)
            except RunStopped as e:
                out["error"], out["at"] = e, time.monotonic()

        th = threading.Thread(target=run)
        th.start()
        wait_for(marker.exists, 10, "the long command starts")
        sleeper = int(marker.read_text())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            sent = time.monotonic()
            reply = provider_pb2_grpc.ResourceProviderStub(ch).Cancel(empty_pb2.Empty(), timeout=5)
        assert reply == empty_pb2.Empty()
        th.join(5)
        assert "error" in out and lifeline.CANCELLED in str(out["error"])
        stopped_in = out["at"] - sent
        assert stopped_in < 5
        wait_for(lambda: not alive(sleeper), 3, "the command's own process ends")
        with pytest.raises(RunStopped, match="not started: the run was cancelled"):
            c.run(["systemctl", "restart", "slurmd"], mutating=True)
        assert c.run(["echo", "probe"], mutating=False).stdout == "probe\n"
    finally:
        server.stop(0)
    with capsys.disabled():
        print(f"\n  Cancel over gRPC: the command in flight stopped {stopped_in * 1000:.0f} ms later")


def test_cancel_is_left_alone_when_the_sdk_changed_its_shape():
    main = types.ModuleType("__main__")

    class DynamicResourceProviderServicer:
        def Cancel(self, request):  # another signature: not ours to replace
            return None

    main.DynamicResourceProviderServicer = DynamicResourceProviderServicer
    main.empty_pb2 = empty_pb2
    code = DynamicResourceProviderServicer.Cancel.__code__
    assert lifeline.install_cancel(main) is False
    assert DynamicResourceProviderServicer.Cancel.__code__ is code


def test_a_failing_hook_still_answers_the_engine(monkeypatch):
    main = sdk_provider_main()
    assert lifeline.install_cancel(main) is True
    main._gpu_fleet_cancel = lambda: 1 / 0
    assert main.DynamicResourceProviderServicer().Cancel(None, None) == empty_pb2.Empty()


def test_the_watchdog_sees_a_shell_shims_parent(tmp_path):
    """ancestry() goes past a shell that did not exec the provider, to the engine."""
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from components.transport import lifeline
        print(json.dumps([[pid, st.comm] for pid, st in lifeline.ancestry()]))
    """)
    p = subprocess.run(["/bin/sh", "-c", '"$@"; exit $?', "shim", sys.executable, "-c", script],
                       capture_output=True, text=True, timeout=30)
    chain = json.loads(p.stdout)
    assert [comm for _, comm in chain][:1] == ["sh"]
    assert chain[1][0] == os.getpid()
