"""Recorded state stays usable (issue 17, part 5): a table over every host primitive.

Each `HostPrimitive` subclass in the code (found by importing every module under
`components`, so a new primitive without an entry here fails `test_every_host_primitive_is_in_the_table`)
is created on a host, the host is then put in each observed state (`absent`: a re-imaged
host; `partly`: the object half there; `there`: as created), and the recorded outputs go
through the engine's own serialization (`recorded`: None dropped, numbers as floats) between
every call, as between two `pulumi` commands. Then:

- `read` (a refresh) sends the probe the stack's inputs give, and keeps every input and every
  value create recorded (what the next probe, plan and rollback need: the issue's
  `KeyError: 'uid'` in `Account.probe_argv` was a refresh that lost `uid`);
- a second `read` of the same host records the same outputs (a refresh twice shows no drift)
  and a refresh of a host as created records exactly what create did;
- `diff` against the stack sees drift exactly when the host is not as created;
- `delete` from the refreshed state sends the commands it would send from the created one
  (the rollback has not lost what it undoes);
- the next `up` (`update`) converges from it: afterwards diff sees no change.

File, Payload and CommandWithVerify run their real scripts on the local filesystem
(tests/unit/fakeconn.py). The others act on what a test cannot touch here (users, apt,
systemd, ZFS): their host answers the stack's own probe command with the probe text of each
state, refuses any other read-only command (a probe from inputs a refresh lost) and records
mutating commands without running them (an applied step converges the object).
"""

from __future__ import annotations

import grp
import importlib
import os
import pkgutil
import pwd
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

import components
from components.errors import FleetError
from components.layers.health.reservation import LentReservationProvider
from components.layers.storage.datasets import ZfsDatasetsProvider, marker_text
from components.providers import base
from components.providers import file as file_module
from components.providers import kept
from components.providers.account import AccountProvider
from components.providers.base import HostPrimitive
from components.providers.parts import recorded_inputs
from components.providers import bundle as bundle_module
from components.providers.bundle import AccountsProvider, BundleProvider, FilesProvider
from components.providers.stored import store_text
from components.providers.command import CommandWithVerifyProvider
from components.providers.file import FileProvider, backup_path, sha256_text
from components.providers.packages import PackageSetProvider
from components.layers.slurm.upgrades import SlurmPackagesProvider
from components.providers.payload import PayloadProvider, sha256_file
from components.providers.sacct import SacctObjectProvider, SacctObjectsProvider
from components.providers.systemd import UNIT_DIR, SystemdUnitProvider
from components.transport import Connection, Result, SshTarget, display

from . import fakeconn
from .fakeconn import Sent, recorded

CONN = SshTarget("node1", "10.0.0.1").as_dict()
ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name
STATES = ("absent", "partly", "there")


# ---- the two kinds of host ------------------------------------------------------------------
class LocalHost:
    """The real probe / apply scripts on the local filesystem (fakeconn); `arrange` puts the
    object in a state by hand."""

    def __init__(self, monkeypatch, arrange: Callable[[str], None]):
        self.fake = fakeconn.install(monkeypatch)
        self.arrange = arrange

    @property
    def sent(self) -> list[Sent]:
        return self.fake.sent

    def clear(self) -> None:
        self.fake.clear()


class _CannedConnection(Connection):
    def __init__(self, target: SshTarget, host: "CannedHost"):
        super().__init__(target)
        self.host = host

    def connect(self, retries: int = 3, backoff_s: float = 1.0) -> None:
        self._connected = True

    def run(self, argv, *, mutating: bool, check: bool = True, **_kw) -> Result:
        cmd = display(argv)
        if mutating and len(argv) > 3 and argv[3] == "gf-seq":  # steps and the read after them
            return self._sequence(list(argv[4:]))
        if not mutating and list(argv[:3]) == kept.probe_argv("", [])[:3]:  # a create's probe + kept record
            inner = display(argv[5:])
            self.host.sent.append(Sent(self.t, inner, False))
            assert inner == self.host.probe, f"a create's probe that is not the stack's: {inner}"
            return Result(0, self.host.answers[self.host.state] + "\n== gf-kept ==\n", "")
        self.host.sent.append(Sent(self.t, cmd, mutating))
        if mutating:  # recorded, never run here; an applied step converges the object
            self.host.state = "there"
            return Result(0, "", "")
        if cmd == self.host.probe:
            return Result(0, self.host.answers[self.host.state], "")
        if any(cmd.startswith(p) for p in self.host.other_reads):
            return Result(0, "", "")
        raise AssertionError(f"a read-only command that is not the stack's probe: {cmd}\n"
                             f"  the stack's probe: {self.host.probe}")

    def _sequence(self, pairs: list[str]) -> Result:
        """transport/sequence.py's one round trip, answered as its commands one by one would
        be: each step recorded (and converging the object), the read after them answered."""
        out = ""
        for n, (spec, line) in enumerate(zip(pairs[::2], pairs[1::2]), 1):
            read = spec == "read"
            assert not read or line == self.host.probe, f"a read after the steps that is not the probe: {line}"
            self.host.sent.append(Sent(self.t, line, not read))
            if not read:
                self.host.state = "there"
            text = self.host.answers[self.host.state] if read else ""
            out += f"== gf-seq {n} 0 {len(text.encode())} 0\n{text}"
        return Result(0, out, "")


class CannedHost:
    """Answers the stack's probe command with the probe text of the current state."""

    def __init__(self, monkeypatch, probe: str, answers: dict[str, str], other_reads: tuple[str, ...] = ()):
        self.probe, self.answers, self.other_reads = probe, answers, other_reads
        self.state = "absent"
        self.sent: list[Sent] = []
        self._conns: dict[SshTarget, _CannedConnection] = {}
        monkeypatch.setattr(base, "connection", self.connection)

    def connection(self, target: SshTarget) -> _CannedConnection:
        return self._conns.setdefault(target, _CannedConnection(target, self))

    def arrange(self, state: str) -> None:
        self.state = state

    def clear(self) -> None:
        self.sent.clear()


# ---- the table ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """How to build a primitive's inputs and host: `build(tmp_path, monkeypatch)` returns
    (stack inputs, host). `before`: the host's state when the object is created; `refused`:
    observed states from which the next up must stop (PlanRefused) instead of converging
    (and `refused_in_preview`: the preview too)."""

    build: Callable[[Path, Any], tuple[dict, Any]]
    before: str = "absent"
    extra_states: tuple[str, ...] = ()
    refused: dict[str, str] = field(default_factory=dict)
    #: the refusal comes at preview already, from the refreshed state (diff raises it)
    refused_in_preview: bool = False


def _file_case(tmp_path: Path, monkeypatch) -> tuple[dict, LocalHost]:
    """A File in a directory that create makes (made_parent) on a host that had neither."""
    d = tmp_path / "etc" / "gf"
    path = d / "x.conf"
    props = {"conn": CONN, "path": str(path), "content": "a=1\n", "mode": "0640", "owner": ME,
             "group": MY_GROUP, "validate": None, "secret": False, "sha256": None, "present": None}

    def arrange(state: str) -> None:
        shutil.rmtree(d, ignore_errors=True)
        if state == "absent":
            return
        d.mkdir(parents=True)
        path.write_text("a=1\n" if state == "there" else "half written\n")
        path.chmod(0o640 if state == "there" else 0o600)

    return props, LocalHost(monkeypatch, arrange)


def _files_case(tmp_path: Path, monkeypatch) -> tuple[dict, LocalHost]:
    """A bundle of two Files by hash in a directory that create makes."""
    monkeypatch.setenv("GPU_FLEET_STORE_DIR", str(tmp_path / "store"))
    d = tmp_path / "etc" / "slurm"
    texts = {d / "a.conf": "a=1\n", d / "b.conf": "b=1\n"}
    members = []
    for path, text in texts.items():
        source, sha = store_text(text)
        members.append({"path": str(path), "source": source, "source_sha256": sha, "mode": "0644",
                        "owner": ME, "group": MY_GROUP, "validate": None, "secret": False})
    props = {"conn": CONN, "bundle": "node1-slurm-config", "members": members}

    def arrange(state: str) -> None:
        shutil.rmtree(d, ignore_errors=True)
        if state == "absent":
            return
        d.mkdir(parents=True)
        for i, (path, text) in enumerate(texts.items()):
            if state == "there" or i == 0:  # partly: the first written, the second not yet
                path.write_text(text)
                path.chmod(0o644)

    return props, LocalHost(monkeypatch, arrange)


def _accounts_case(tmp_path: Path, monkeypatch) -> tuple[dict, CannedHost]:
    """A bundle of one account (the canned host answers one probe command)."""
    props, host = _account_case(tmp_path, monkeypatch)
    bundled = {"conn": CONN, "bundle": "node1-accounts", "members": [{k: v for k, v in props.items() if k != "conn"}]}
    host.probe = display(AccountsProvider().probe_argv(bundled))
    host.answers = {k: f"{v}{bundle_module._END}\n" for k, v in host.answers.items()}  # the member's end
    return bundled, host


def _payload_case(tmp_path: Path, monkeypatch) -> tuple[dict, LocalHost]:
    """A Payload over an original file (backed up on create, restored by delete)."""
    src = tmp_path / "artifact.tar"
    src.write_bytes(b"\x00payload\xff" * 100)
    path = tmp_path / "opt" / "payload.tar"
    backup = Path(backup_path(str(path)))
    props = {"conn": CONN, "path": str(path), "source": str(src), "source_sha256": sha256_file(src),
             "mode": "0644", "owner": ME, "group": MY_GROUP, "validate": None, "secret": False,
             "sha256": None, "present": None}

    def arrange(state: str) -> None:
        for f in (path, backup):
            f.unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        if state == "original":
            path.write_text("the host's own file\n")
            return
        if state == "absent":  # re-imaged: neither the payload nor the backup of the original
            return
        backup.parent.mkdir(parents=True, exist_ok=True)
        backup.write_text("the host's own file\n")
        path.write_bytes(src.read_bytes() if state == "there" else b"\x00pay")  # partly: cut short
        path.chmod(0o644)

    return props, LocalHost(monkeypatch, arrange)


def _command_case(tmp_path: Path, monkeypatch) -> tuple[dict, LocalHost]:
    marker = tmp_path / "marker"
    props = {"conn": CONN, "create": ["sh", "-c", 'echo made > "$1"', "sh", str(marker)],
             "verify": ["grep", "-qx", "made", str(marker)], "delete": ["rm", "-f", "--", str(marker)],
             "create_stdin": None, "triggers": {"conf": "abc"}, "verified": None, "inputs_hash": None}

    def arrange(state: str) -> None:
        marker.unlink(missing_ok=True)
        if state != "absent":
            marker.write_text("made\n" if state == "there" else "ma")

    return props, LocalHost(monkeypatch, arrange)


ACCOUNT = "gf-table-user"
_PASSWD = f"{ACCOUNT}:x:64999:64999::/nonexistent:/usr/sbin/nologin"
_GROUP = f"{ACCOUNT}:x:64999:"


def _account_case(tmp_path: Path, monkeypatch) -> tuple[dict, CannedHost]:
    props = {"conn": CONN, "name": ACCOUNT, "uid": 64999, "gid": 64999, "home": "/nonexistent",
             "shell": "/usr/sbin/nologin"}
    answers = {
        # as getent answers `getent passwd <name> <uid>` (each key's entry) and the same in group
        "absent": "== passwd\n== group\n",
        "partly": f"== passwd\n{_PASSWD}\n{_PASSWD}\n== group\n",  # the user without its group
        "there": f"== passwd\n{_PASSWD}\n{_PASSWD}\n== group\n{_GROUP}\n{_GROUP}\n",
    }
    return props, CannedHost(monkeypatch, display(AccountProvider().probe_argv(props)), answers)


def _dpkg(*lines: str) -> str:
    """The probe's answer: dpkg-query's lines (a held package's status starts with h)."""
    return "\n".join(["== installed", "libc6 2.36-9 ii ", *lines, "== dpkg-updates"]) + "\n"


def _packages_case(tmp_path: Path, monkeypatch) -> tuple[dict, CannedHost]:
    props = {"conn": CONN, "packages": {"slurmd": "22.05.8-4", "munge": "0.5.15-2"}, "hold": True,
             "allow_downgrade": False, "versions": None, "held": None, "added": None}
    answers = {
        "absent": _dpkg(),
        # munge and its library there, not held; slurmd missing
        "partly": _dpkg("munge 0.5.15-2 ii ", "libmunge2 0.5.15-2 ii "),
        "there": _dpkg("munge 0.5.15-2 hi ", "libmunge2 0.5.15-2 ii ", "slurmd 22.05.8-4 hi "),
    }
    return props, CannedHost(monkeypatch, display(PackageSetProvider().probe_argv(props)), answers,
                             other_reads=("env DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a apt-get -s purge",))


def _slurm_packages_case(tmp_path: Path, monkeypatch) -> tuple[dict, CannedHost]:
    """The Slurm layer's sets: extra, a host whose slurmd is from a major 22.05 cannot
    upgrade from (layers/slurm/upgrades.py)."""
    props, host = _packages_case(tmp_path, monkeypatch)
    host.answers["too-old"] = _dpkg("munge 0.5.15-2 hi ", "slurmd 20.02.7-1 hi ")
    return {**props, "upgrade_from": ["slurmd"]}, host


UNIT = "gf-table.service"
UNIT_TEXT = "[Service]\nExecStart=/bin/true\n"
DROPIN_TEXT = "[Service]\nDelegate=yes\n"


def _unit_probe(unit: Optional[str], dropin: Optional[str], show: dict[str, str]) -> str:
    """The probe's answer: sha256sum's line for a file there, `file <path> absent` otherwise."""
    def file(path: str, digest: Optional[str]) -> str:
        return f"sha256 {digest}  {path}" if digest else f"file {path} absent"

    lines = [file(f"{UNIT_DIR}/{UNIT}", unit), file(f"{UNIT_DIR}/{UNIT}.d/10-delegate.conf", dropin),
             "== show", *(f"{k}={v}" for k, v in show.items())]
    return "\n".join(lines) + "\n"


def _unit_case(tmp_path: Path, monkeypatch) -> tuple[dict, CannedHost]:
    props = {"conn": CONN, "name": UNIT, "content": UNIT_TEXT, "dropins": {"10-delegate.conf": DROPIN_TEXT},
             "enabled": True, "active": True, "properties": {"Delegate": "yes"}, "triggers": {"key": "k1"},
             "files": None, "live": None}
    unit, dropin = sha256_text(UNIT_TEXT), sha256_text(DROPIN_TEXT)
    answers = {
        "absent": _unit_probe(None, None, {"LoadState": "not-found", "ActiveState": "inactive",
                                           "UnitFileState": "", "NeedDaemonReload": "no", "Delegate": "no"}),
        # the unit file without its drop-in, loaded, never enabled or started
        "partly": _unit_probe(unit, None, {"LoadState": "loaded", "ActiveState": "inactive",
                                           "UnitFileState": "disabled", "NeedDaemonReload": "no",
                                           "Delegate": "no"}),
        "there": _unit_probe(unit, dropin, {"LoadState": "loaded", "ActiveState": "active",
                                            "UnitFileState": "enabled", "NeedDaemonReload": "no",
                                            "Delegate": "yes"}),
    }
    return props, CannedHost(monkeypatch, display(SystemdUnitProvider().probe_argv(props)), answers)


ZFS_PROPS = {
    "conn": CONN, "pool": "ai", "data_dirs": ["jobs", "inputs"],
    "datasets": [
        {"duty": "models", "name": "ai/models", "mountpoint": "/srv/ai/models",
         "properties": {"mountpoint": "/srv/ai/models", "canmount": "on", "sharenfs": "off", "readonly": "on"}},
        {"duty": "data", "name": "ai/data", "mountpoint": "/srv/ai/data",
         "properties": {"mountpoint": "/srv/ai/data", "canmount": "on", "sharenfs": "off", "readonly": "off"}},
    ],
    "guids": None, "mounts": None, "stores_ok": None, "health": None, "dirs": None,
}
_GUIDS = {"ai/models": "111", "ai/data": "222"}


def _zfs_probe(pool: bool, there: tuple[str, ...]) -> str:
    out = ["== pool", "ai\tONLINE" if pool else "cannot open 'ai': no such pool",
           "== status", "  pool: ai\n state: ONLINE" if pool else "cannot open 'ai': no such pool"]
    props = []
    for i, s in enumerate(ZFS_PROPS["datasets"]):
        ds, mp = s["name"], s["mountpoint"]
        out.append(f"== mount {ds}")
        if ds in there:
            opts = "ro" if s["properties"]["readonly"] == "on" else "rw"
            out.append(f'TARGET="{mp}" SOURCE="{ds}" FSTYPE="fuse.zfs" OPTIONS="{opts},relatime" ID="{40 + i}"')
        else:
            out.append('TARGET="/" SOURCE="overlay" FSTYPE="overlay" OPTIONS="rw,relatime" ID="1"')
        out.append(f"== marker {ds}")
        if ds in there:
            out.append(marker_text(ds, _GUIDS[ds]))
            props += [f"{ds}\t{k}\t{v}\tlocal" for k, v in s["properties"].items()]
            props += [f"{ds}\tmounted\tyes\t-", f"{ds}\tguid\t{_GUIDS[ds]}\t-"]
    out += ["== props", *props]
    for d in ZFS_PROPS["data_dirs"]:
        out += [f"== dir {d}", "1777" if "ai/data" in there else ""]
    return "\n".join([*out, "== end"]) + "\n"


def _zfs_case(tmp_path: Path, monkeypatch) -> tuple[dict, CannedHost]:
    answers = {
        "absent": _zfs_probe(True, ()),  # the admin's pool, the layer's datasets not made yet
        "partly": _zfs_probe(True, ("ai/models",)),  # models there, data not
        "there": _zfs_probe(True, ("ai/models", "ai/data")),
        "pool-gone": _zfs_probe(False, ()),  # the pool not imported (the seed's failure)
    }
    return ZFS_PROPS, CannedHost(monkeypatch, display(ZfsDatasetsProvider().probe_argv(ZFS_PROPS)), answers)


def _sacct_case(tmp_path: Path, monkeypatch) -> tuple[dict, CannedHost]:
    """A QOS in slurmdbd; partly: there with its GrpTRES edited by hand."""
    props = {"conn": CONN, "kind": "qos", "name": "gpu", "account": None, "cluster": None,
             "fields": {"GrpTRES": "gres/gpu=8", "Priority": "10"}, "present": None, "created": None,
             "before": None}
    answers = {"absent": "", "partly": "gpu|gres/gpu=99|10\n", "there": "gpu|gres/gpu=8|10\n"}
    return props, CannedHost(monkeypatch, display(SacctObjectProvider().probe_argv(props)), answers)


def _sacct_bundle_case(tmp_path: Path, monkeypatch) -> tuple[dict, CannedHost]:
    """A team's QOS, account and member in one SlurmAccounting; partly: the QOS there with its
    GrpTRES edited by hand, the account and user not added yet."""
    members = [{"kind": "qos", "name": "vision", "account": None, "fields": {"GrpTRES": "gres/gpu=8", "Priority": "10"}},
               {"kind": "account", "name": "vision", "account": None, "fields": {"Fairshare": "30"}},
               {"kind": "user", "name": "alice", "account": "vision", "fields": {}}]
    props = {"conn": CONN, "bundle": "tenancy-accounting", "cluster": "lab", "members": members, "records": None}
    qos_end, assoc_end = "@@gpu-fleet-qos-end\n", "@@gpu-fleet-assoc-end\n"
    answers = {"absent": qos_end + assoc_end,
               "partly": "vision|10|gres/gpu=99\n" + qos_end + assoc_end,
               "there": "vision|10|gres/gpu=8\n" + qos_end + "lab|vision|||30\nlab|vision|alice||1\n" + assoc_end}
    return props, CannedHost(monkeypatch, display(SacctObjectsProvider().probe_argv(props)), answers)


def _reservation_case(tmp_path: Path, monkeypatch) -> tuple[dict, CannedHost]:
    """The health layer's lent reservation; partly: made by hand with one node and no REPLACE_DOWN."""
    props = {"conn": CONN, "name": "train", "partition": "reserve", "node_count": 2, "users": ["alice"],
             "accounts": [], "spares": ["node3"], "nodes": None, "standing_in": None, "lent_from": None}

    def show(nodes: str, count: int, flags: str) -> str:
        return (f"ReservationName=train StartTime=2026-12-06T03:00:00 Nodes={nodes} NodeCnt={count} "
                f"PartitionName=reserve Flags={flags} Users=alice Accounts=(null) State=ACTIVE\n== hostnames\n"
                + "".join(f"{n}\n" for n in ("node1", "node2")[:count]))
    answers = {"absent": "absent\n", "partly": show("node1", 1, "SPEC_NODES"), "there": show("node[1-2]", 2, "REPLACE_DOWN")}
    return props, CannedHost(monkeypatch, display(LentReservationProvider().probe_argv(props)), answers)


CASES: dict[type, Case] = {
    FileProvider: Case(_file_case),
    # extra: re-imaged with the host's own original back at the path, its backup gone
    PayloadProvider: Case(_payload_case, before="original", extra_states=("original",)),
    CommandWithVerifyProvider: Case(_command_case),
    AccountProvider: Case(_account_case),
    FilesProvider: Case(_files_case),
    AccountsProvider: Case(_accounts_case),
    PackageSetProvider: Case(_packages_case),
    SlurmPackagesProvider: Case(_slurm_packages_case, extra_states=("too-old",),
                                refused={"too-old": "Slurm 22.05 upgrades in place only from 21.08 or 20.11"},
                                refused_in_preview=True),
    SystemdUnitProvider: Case(_unit_case),
    SacctObjectProvider: Case(_sacct_case),
    SacctObjectsProvider: Case(_sacct_bundle_case),
    LentReservationProvider: Case(_reservation_case),

    ZfsDatasetsProvider: Case(_zfs_case, extra_states=("pool-gone",),
                              refused={"pool-gone": "pool 'ai' is not imported"}),
}


def _subclasses(cls: type) -> set[type]:
    out = set()
    for s in cls.__subclasses__():
        out |= {s} | _subclasses(s)
    return out


def host_primitives() -> set[type]:
    """Every HostPrimitive subclass in the code (every module under `components` imported)."""
    for m in pkgutil.walk_packages(components.__path__, "components."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)
    return {c for c in _subclasses(HostPrimitive) if c.__module__.startswith("components.")
            and c is not BundleProvider}  # the bundles' base, which names no member kind


def test_every_host_primitive_is_in_the_table():
    found = host_primitives()
    missing = sorted(f"{c.__module__}.{c.__name__}" for c in found - set(CASES))
    assert not missing, f"host primitives without a row in CASES (add one: absent, partly, there): {missing}"
    assert set(CASES) <= found


# ---- the test -------------------------------------------------------------------------------
def probes(host) -> list[str]:
    """Read-only commands sent; a probe that also reads the kept record (providers/kept.py) as
    the probe it wraps."""
    wrapper = display(kept.probe_argv("", []))[:-2]  # without the empty path's quotes
    return [re.sub(rf"^{re.escape(wrapper)}\S+ ", "", s.cmd) for s in host.sent if not s.mutating]


def mutating(host) -> list[str]:
    return [s.cmd for s in host.sent if s.mutating]


def rows():
    for cls, case in CASES.items():
        for state in (*STATES, *case.extra_states):
            yield pytest.param(cls, state, id=f"{cls.__name__.removesuffix('Provider')}-{state}")


@pytest.mark.parametrize("cls,seen", list(rows()))
def test_a_refresh_records_what_the_next_read_diff_delete_and_up_can_use(cls, seen, tmp_path, monkeypatch):
    monkeypatch.setattr(file_module, "BACKUP_DIR", str(tmp_path / "backup"))
    case = CASES[cls]
    props, host = case.build(tmp_path, monkeypatch)
    p = cls()
    probe = display(p.probe_argv(props))

    host.arrange(case.before)
    res = p.create(props)
    id_, created = res.id, recorded(res.outs)
    assert probe in probes(host)

    # refresh: the stack's probe, every input and every recorded value kept
    host.arrange(seen)
    host.clear()
    refreshed = recorded(p.read(id_, created).outs)
    assert mutating(host) == [] and set(probes(host)) == {probe}
    have = recorded_inputs(refreshed)
    for k, v in recorded(p.public_inputs(props)).items():
        assert have.get(k) == v, f"input {k!r}: the refreshed state gives {have.get(k)!r}, the stack {v!r}"
    for k in p.record_keys:
        assert refreshed.get(k) == created.get(k), f"create's record {k!r} changed on refresh"
    if seen == "there":
        assert refreshed == created  # a refresh of the host as created records no drift

    # a second refresh: the same probe, the same outputs
    host.clear()
    again = recorded(p.read(id_, refreshed).outs)
    assert set(probes(host)) == {probe} and mutating(host) == []
    assert again == refreshed

    # diff (preview) never touches the host; drift exactly when the host is not as created
    host.clear()
    if seen in case.refused and case.refused_in_preview:  # the preview already says why
        with pytest.raises(FleetError, match=case.refused[seen]):
            p.diff(id_, again, props)
        assert host.sent == []
    else:
        d = p.diff(id_, again, props)
        assert host.sent == []
        assert (d.changes, d.replaces) == (seen != "there", [])

    # delete (destroy) from the refreshed state does what it would do from the created one
    # (on the same host: what the primitive keeps there, providers/kept.py, put back too)
    kept_dir = Path(os.environ.get("GPU_FLEET_KEPT_DIR") or tmp_path / "no-kept")
    saved = tmp_path / "kept-saved"
    if kept_dir.exists():
        shutil.copytree(kept_dir, saved)
    host.arrange(seen)
    host.clear()
    p.delete(id_, created)
    from_created = mutating(host)
    if saved.exists():
        shutil.rmtree(kept_dir, ignore_errors=True)
        shutil.copytree(saved, kept_dir)
    host.arrange(seen)
    host.clear()
    p.delete(id_, again)
    assert mutating(host) == from_created and probes(host)[0] == probe

    # the next up converges from the refreshed state (or refuses, naming why)
    host.arrange(seen)
    host.clear()
    if seen in case.refused:
        with pytest.raises(FleetError, match=case.refused[seen]):
            p.update(id_, again, props)
        return
    updated = recorded(p.update(id_, again, props).outs)
    assert p.diff(id_, updated, props).changes is False
    assert updated == created
    if seen == "there":
        assert mutating(host) == []  # nothing to do on a host as created



def test_a_file_over_an_original_on_a_host_reimaged_with_it_back(tmp_path, monkeypatch):
    """Destroy leaves the host's own original; the next up keeps it again before writing."""
    monkeypatch.setattr(file_module, "BACKUP_DIR", str(tmp_path / "backup"))
    props, host = _payload_case(tmp_path, monkeypatch)
    p, path, backup = PayloadProvider(), Path(props["path"]), Path(backup_path(props["path"]))
    host.arrange("original")
    res = p.create(props)
    id_, created = res.id, recorded(res.outs)
    assert created["original"] == "backup" and backup.read_text() == "the host's own file\n"
    host.arrange("original")
    shutil.rmtree(os.environ["GPU_FLEET_KEPT_DIR"])  # re-imaged: what the primitive kept there is gone too
    refreshed = recorded(p.read(id_, created).outs)
    host.clear()
    p.delete(id_, refreshed)
    assert mutating(host) == [] and path.read_text() == "the host's own file\n"
    p.update(id_, refreshed, props)
    assert backup.read_text() == "the host's own file\n" and path.read_bytes() == Path(props["source"]).read_bytes()
