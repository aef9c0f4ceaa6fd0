"""The `lab` fixture: real local hosts (systemd-nspawn) for the tests in this directory.

Session-scoped: the first test that asks for it runs `python -m lab up` (seconds
when the lab is already up; the first time on a machine it also builds the
cached image, about a minute and a half) and the session ends with
`python -m lab down` (set GPU_FLEET_LAB_KEEP=1 to leave the lab up). Needs
root; elsewhere the lab tests are skipped.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from components.layers.acceptance.restart import UNIT as REOPEN_UNIT
from tests.pulumi_cli import PulumiProject

from . import shards
from .labhosts import HOSTS, packages, snapshot, ssh

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".state" / "lab"


RELEASE24_MODULES = "test_v2411_"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With GPU_FLEET_LAB_SHARD=K/N only the lab tests of lab K run (tests/lab/shards.py).

    The modules that start from the `deployed` fleet run after the others. The test_v2411_*
    modules run last, whatever the other modules are named: their shared
    stack (`release24`) leaves Slurm 24.11 installed on the hosts until the session ends, and
    the 22.05 stacks of any module after them would be refused (Slurm does not downgrade)."""
    spec = os.environ.get("GPU_FLEET_LAB_SHARD")
    if spec:
        k, n = shards.parse(spec)
        here = Path(__file__).parent
        lab_items = [i for i in items if i.path.parent == here]
        # every module here, run or not: a module's lab does not depend on what else was asked for
        mine = shards.assign(sorted(p.name for p in here.glob("test_*.py")), n)
        other = [i for i in lab_items if mine[i.path.name] != k]
        if other:
            config.hook.pytest_deselected(items=other)
            drop = set(map(id, other))
            items[:] = [i for i in items if id(i) not in drop]
    # then the modules that start from the `deployed` fleet, one after another: only the first
    # module after them that does not needs the hosts made again
    items.sort(key=lambda item: (item.path.name.startswith(RELEASE24_MODULES),
                                 item.path.parent == Path(__file__).parent
                                 and "deployed" in getattr(item, "fixturenames", ())))


def lab_command(*args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    """Run `python -m lab <args>` from the repo root with this interpreter."""
    p = subprocess.run([sys.executable, "-m", "lab", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"python -m lab {' '.join(args)} exited {p.returncode}:\n"
                             f"{p.stdout}\n{p.stderr}")
    return p


def require_lab_machine() -> None:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (systemd-nspawn, mounts, cgroups, a bridge)")
    missing = [t for t in ("systemd-nspawn", "debootstrap", "zstd", "ssh", "dpkg-scanpackages", "ip")
               if shutil.which(t) is None]
    if missing:
        pytest.fail(f"lab tools missing: {', '.join(missing)}: run `make setup` (as root) first")


@dataclass
class Lab:
    """The running lab: hosts (name, address, roles), the key and known_hosts to reach them."""

    hosts: list[dict]
    identity_file: Path
    known_hosts_file: Path
    inventory: dict = field(repr=False, default_factory=dict)

    def host(self, name: str) -> dict:
        return next(h for h in self.hosts if h["name"] == name)

    def names(self, role: str | None = None) -> list[str]:
        return [h["name"] for h in self.hosts if role is None or role in h["roles"]]

    def ssh_argv(self, name: str, user: str = "root") -> list[str]:
        return [
            "ssh", "-F", "/dev/null", "-i", str(self.identity_file), "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts_file}", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
            "-o", "LogLevel=ERROR", f"{user}@{self.host(name)['address']}",
        ]

    def ssh(self, name: str, script: str, user: str = "root", check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess:
        p = subprocess.run([*self.ssh_argv(name, user), "--", script], capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and p.returncode != 0:
            raise AssertionError(f"{user}@{name}: {script!r} exited {p.returncode}:\n{p.stdout}{p.stderr}")
        return p


def load_lab() -> Lab:
    inv = json.loads((STATE / "inventory.json").read_text())
    return Lab(
        hosts=[{"name": h["name"], "address": h["address"], "roles": h["roles"]} for h in inv["hosts"]],
        identity_file=ROOT / inv["identity_file"],
        known_hosts_file=ROOT / inv["known_hosts_file"],
        inventory=inv,
    )


class LabUsers:
    """Test sessions using the lab hold a shared lock on `.state/lab/.users`.

    A session brings the lab down at its end only when no other session holds
    it, and tests that take the lab down themselves first wait for the lock
    exclusively, so two test runs in one tree do not pull hosts from under each other.
    """

    def __init__(self) -> None:
        STATE.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(STATE / ".users", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_SH)

    def try_exclusive(self) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            fcntl.flock(self.fd, fcntl.LOCK_SH)  # a failed conversion may drop the lock
            return False

    def exclusive(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not self.try_exclusive():
            if time.monotonic() > deadline:
                pytest.fail(f"another test session kept using the lab for {timeout:.0f} s")
            time.sleep(1)

    def shared(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_SH)

    def close(self) -> None:
        os.close(self.fd)


def remake_hosts(users: LabUsers) -> None:
    """The lab's hosts made again from the image (down, then up: seconds), waiting until no
    other test session uses the lab: what earlier tests left on them is gone."""
    users.exclusive()
    try:
        lab_command("down", "--keep-checkpoints", timeout=300)
        lab_command("up")
    finally:
        users.shared()
    _DIRTY.clear()


#: set while the hosts hold a fleet restored from a checkpoint that no stack of a later module
#: knows (`Deployed.project`): a module that does not start from it gets fresh hosts first
_DIRTY: set[str] = set()


def open_partitions() -> list[str]:
    """The partitions slurmctld has UP now."""
    return [line.split()[0].removeprefix("PartitionName=") for line in
            ssh("ctl", "scontrol show partition -o").stdout.splitlines() if " State=UP " in f"{line} "]


@dataclass
class Deployed:
    """The lab stack as `make lab` deploys it (GPU baseline, Slurm 22.05, acceptance), deployed once
    on fresh hosts and kept: the hosts as lab checkpoint `NAME` (lab/checkpoint.py), the stack's
    file and state as `base` left them."""

    NAME = "deployed22"
    base: PulumiProject
    users: LabUsers
    #: the fresh hosts it was deployed on, for "as before" after a destroy (labhosts.snapshot)
    fresh: dict[str, dict[str, str]]
    fresh_ctl_packages: dict[str, str]
    #: the partitions open once the acceptance passed
    opened: list[str]

    def project(self, tmp: Path) -> PulumiProject:
        """A project of its own whose lab stack holds that fleet, on hosts put back as the
        checkpoint kept them (each booted again): a module's first `up` then changes only what
        its own config adds. Whatever the module leaves, the next module that does not start
        here gets fresh hosts (`_fresh_hosts_after_deployed`)."""
        self.users.exclusive()
        try:
            lab_command("checkpoint", "restore", self.NAME, timeout=600)
        finally:
            self.users.shared()
        _DIRTY.add(self.NAME)
        # slurmctld boots with the partitions as slurm.conf has them (INACTIVE until acceptance
        # passes; without -R it recovers jobs and nodes only): the acceptance layer's unit
        # reopens the ones its verdict opened, which every module starting here relies on
        end = time.monotonic() + 90
        while (up := open_partitions()) != self.opened and time.monotonic() < end:
            time.sleep(0.5)
        assert up == self.opened, (f"after a reboot of every host the partitions open are {up}, not {self.opened}:\n"
                                   + ssh("ctl", f"journalctl -b -u {REOPEN_UNIT} --no-pager -o cat",
                                         check=False).stdout[-2000:])
        proj = PulumiProject.copy_of_repo(tmp)
        stack = "stacks/Pulumi.lab.yaml"
        shutil.copy2(self.base.dir / stack, proj.dir / stack)
        shutil.copytree(self.base.backend, proj.backend, dirs_exist_ok=True)
        # what the first `up` wrote on this machine (the acceptance report)
        shutil.copytree(self.base.dir / ".state" / "artifacts", proj.dir / ".state" / "artifacts")
        return proj


@pytest.fixture(scope="session")
def lab_session():
    """Brings the lab down when the session ends, whichever test brought it up, unless
    another test session still uses it (or GPU_FLEET_LAB_KEEP=1)."""
    require_lab_machine()
    users = LabUsers()
    try:
        yield users
        if os.environ.get("GPU_FLEET_LAB_KEEP") != "1":
            if users.try_exclusive():
                lab_command("down", timeout=300)
            else:
                print("\nlab left up: another test session is using it")
    finally:
        users.close()


@pytest.fixture(scope="session")
def lab(lab_session) -> Lab:
    """The default lab (storage, ctl, node1..node3), up and reachable over SSH.

    A session that has the lab to itself starts from fresh hosts (down, then up: seconds),
    so what `make lab` or an earlier run deployed cannot leak into "as before" checks."""
    if lab_session.try_exclusive():
        try:
            lab_command("down", timeout=300)
            lab_command("up")
        finally:
            lab_session.shared()
    else:
        lab_command("up")
    return load_lab()


@pytest.fixture(scope="session")
def deployed(lab, lab_session, tmp_path_factory):
    """The deployed 22.05 fleet modules start from (`Deployed`): one `up` on fresh hosts per
    session instead of one per module, and no destroy after each (the modules that test destroy
    run it themselves)."""
    remake_hosts(lab_session)
    fresh = {h: snapshot(h) for h in HOSTS}
    fresh_ctl = packages("ctl")
    base = PulumiProject.copy_of_repo(tmp_path_factory.mktemp("deployed22"))
    base.init_stack("lab")
    base.up(timeout=1500)
    opened = open_partitions()
    assert opened, "the lab stack's first up opened no partition"
    lab_command("checkpoint", "save", Deployed.NAME, timeout=600)
    try:
        yield Deployed(base, lab_session, fresh, fresh_ctl, opened)
    finally:
        lab_command("checkpoint", "drop", Deployed.NAME, check=False)


@pytest.fixture(autouse=True, scope="module")
def _fresh_hosts_after_deployed(request):
    """A module that does not start from the `deployed` fleet gets fresh hosts when the module
    before it left a restored fleet that no stack of its own knows (what a module's destroy
    would have taken off)."""
    mine = [i for i in request.session.items if i.module is request.module]
    names = {f for i in mine for f in i.fixturenames}
    # release24 makes the hosts again itself
    if _DIRTY and "lab" in names and not names & {"deployed", "release24"}:
        remake_hosts(request.getfixturevalue("lab_session"))
    yield


@pytest.fixture(autouse=True, scope="module")
def _module_probe_memory(tmp_path_factory):
    """Each module's own refresh probe memory (components/transport/refresh.py): a module's
    first refresh of a host then sends only what that module's stacks probed, not every line
    earlier modules' stacks left on the same hosts (slow ones included: a stopped daemon's
    reachability check waits for its timeout)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPU_FLEET_PROBE_DIR", str(tmp_path_factory.mktemp("module-probes")))
        yield


@pytest.fixture(scope="session")
def release24(lab, lab_session, tmp_path_factory):
    """The lab stack on Slurm 24.11 (tests/lab/release24.py), up with accounting off, shared by
    the test_v2411_* modules (each leaves what the next expects, as its docstring says);
    destroyed when the session ends only if the lab stays up (GPU_FLEET_LAB_KEEP=1).

    Fresh hosts: a controller that never ran Slurm. What earlier modules leave on ctl (22.05
    held and serving, its state, which a rollback keeps as it keeps all data) is not what
    these modules test, and 24.11 refuses 22.05's state (`fatal: Can not recover assoc_usage
    state, incompatible version`: Slurm upgrades from a few releases back at most)."""
    from .release24 import release24_project, state_file

    remake_hosts(lab_session)
    proj = release24_project(tmp_path_factory.mktemp("release24"))
    try:
        proj.up(timeout=1500)  # accounting off: the controller's own ID
        proj.own = state_file()
        yield proj
    finally:
        # The session's end brings the lab down (lab_session), hosts and all; a destroy before it
        # asserted nothing (each module tests the rollbacks it means to) and took 13-14 s of the
        # last module's time. A lab kept up is left as a destroy leaves it.
        if os.environ.get("GPU_FLEET_LAB_KEEP") == "1":
            proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=1200)
