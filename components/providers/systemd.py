"""SystemdUnit: a unit file and its drop-ins, enabled/active, live properties verified.

The seed's canary failed on a unit whose file said `Delegate=yes` while the
running manager had not loaded it: what counts is `systemctl show`, so the
expected properties are read back live after every apply and on refresh.
`daemon-reload` runs only when a file changed (or systemd asks for it); a
running unit is restarted only when its files changed. Delete restores the
enablement and activity the unit had before create and removes what was written.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, UpdateResult

from ..errors import FleetError
from ..facts.systemd import parse_show
from ..scripts import script
from ..kit import sh
from .base import HostPrimitive
from .parts import NotConverged, Observed, Props, Step, _entry, run_steps
from .file import sha256_text, sha256sum_line, write_step

UNIT_DIR = "/etc/systemd/system"
#: lines of a unit's journal a failed start shows (where the daemon says why it stopped)
JOURNAL_LINES = 15
_BASE_PROPS = ("LoadState", "ActiveState", "UnitFileState", "NeedDaemonReload")
#: ActiveStates of a unit whose daemon runs (or is being started): `start` would not start it again
RUNNING = ("active", "activating", "reloading")
#: an apply's note to create and update, never kept: its own steps started or restarted the unit
_STARTED = "_started_by_apply"

_PROBE = script(__file__, "systemd_probe.sh")  # $PROPS: the -p options of `properties`
_JOURNAL = script(__file__, "unit_journal.sh")
#: where journald keeps a state file per open stdout stream, and how long to wait for the
#: failed unit's streams to be read (tenths of a second)
STREAMS_DIR = "/run/systemd/journal/streams"
STREAM_WAIT = 50


def journal_argv(unit: str) -> list[str]:
    """The end of `unit`'s journal once journald has read the unit's own output."""
    return sh(_JOURNAL, unit, str(JOURNAL_LINES), STREAMS_DIR, str(STREAM_WAIT))


def unit_paths(props: Props) -> dict[str, str]:
    """Managed path -> content: the unit file (if given) and each drop-in."""
    name = props["name"]
    out = {}
    if props.get("content") is not None:
        out[f"{UNIT_DIR}/{name}"] = props["content"]
    for fname, content in sorted((props.get("dropins") or {}).items()):
        out[f"{UNIT_DIR}/{name}.d/{fname}"] = content
    return out


def parse_unit_probe(stdout: str) -> Observed:
    """Sections: a managed file's `sha256` line (sha256sum's) or `file <path> absent`, then
    `== show` (systemctl show), and for an active mount unit `== reach`: `ok`, or what
    reading the mounted root answered (a stale handle, a timeout)."""
    files: dict[str, Optional[str]] = {}
    show: list[str] = []
    reach: Optional[str] = None
    section = ""
    for line in stdout.splitlines():
        if line.startswith("== "):
            section = line[3:]
        elif section == "show":
            show.append(line)
        elif section == "reach" and line.strip():
            reach = line.strip() if reach is None else f"{reach}; {line.strip()}"
        elif not section and line.startswith("sha256 "):  # sha256sum's own line
            digest, path = sha256sum_line(line[len("sha256 "):])
            files[path] = digest
        elif not section and line.startswith("file ") and line.endswith(" absent"):
            files[line[len("file "):-len(" absent")]] = None
    return {"files": files, "show": parse_show("\n".join(show)), "reach": reach}



#: `active` in the props of a oneshot its timer starts (a None input would not reach the provider)
BY_TIMER = "timer"


def wanted_active(props: Props) -> Optional[bool]:
    """True: running; False: stopped; None: a oneshot its timer starts, whose activity is
    neither planned nor checked (a stop, or a check that it is inactive, races the timer)."""
    active = props.get("active", True)
    return None if active == BY_TIMER else bool(active)


def unreachable(obs: Observed) -> Optional[str]:
    """What an active mount unit's root answered when it is not `ok`; None otherwise."""
    reach = obs.get("reach")
    return None if reach in (None, "ok") else reach


class SystemdUnitProvider(HostPrimitive):
    replace_on = ("name",)
    record_keys = ("was_enabled", "was_active")

    def key(self, props: Props) -> str:
        return props["name"]

    def probe_argv(self, props: Props) -> list[str]:
        extra = " ".join(f"-p {p}" for p in sorted(props.get("properties") or {}))
        script = _PROBE.replace("$PROPS", extra)
        return sh(script, props["name"], *unit_paths(props))

    def parse(self, props: Props, stdout: str) -> Observed:
        return parse_unit_probe(stdout)

    def apply(self, props: Props, record: Props) -> Props:
        """Apply; a unit that does not come up is reported with the end of its journal, where
        the daemon says why (24.11's slurmctld on 22.05's state: `fatal: Can not recover
        assoc_usage state, incompatible version`), not only with the start still planned."""
        try:
            return super().apply(props, record)
        except NotConverged as e:
            try:  # the journal adds to the error; failing to read it must not replace it
                log = self._conn(props).run(journal_argv(props["name"]), mutating=False,
                                            check=False).stdout.rstrip() or "(empty)"
            except FleetError as unread:
                log = f"(not read: {unread})"
            lines = "\n".join(f"    {line}" for line in log.splitlines())
            raise NotConverged(f"{e}\n  the unit's journal, last {JOURNAL_LINES} lines:\n{lines}") from None

    def desired(self, props: Props) -> dict[str, Any]:
        return {
            "files": {p: sha256_text(c) for p, c in unit_paths(props).items()},
            "enabled": bool(props.get("enabled", True)),
            "active": wanted_active(props),
            "live": dict(sorted((props.get("properties") or {}).items())),
        }

    def state(self, props: Props, obs: Observed) -> dict[str, Any]:
        show = obs["show"]
        return {
            "files": {p: obs["files"].get(p) for p in unit_paths(props)},
            "enabled": show.get("UnitFileState") in ("enabled", "enabled-runtime"),
            # a mount whose root answers an error is not serving: not the active state wanted
            "active": None if wanted_active(props) is None
            else show.get("ActiveState") in RUNNING and not unreachable(obs),
            "live": {k: show.get(k) for k in sorted(props.get("properties") or {})},
        }

    def remember(self, props: Props, before: Observed) -> Props:
        show = before["show"]
        return {"was_enabled": show.get("UnitFileState") == "enabled",
                "was_active": show.get("ActiveState") == "active"}

    def plan(self, props: Props, obs: Observed, record: Props) -> list[Step]:
        name = props["name"]
        want = self.desired(props)
        steps: list[Step] = []
        changed = False
        for path, content in unit_paths(props).items():
            if obs["files"].get(path) != want["files"][path]:
                steps.append(write_step(path, content, "root", "root", "0644", why="write unit"))
                changed = True
        if changed or obs["show"].get("NeedDaemonReload") == "yes":
            steps.append(Step(["systemctl", "daemon-reload"], "unit files changed"))
        st = self.state(props, obs)
        if want["enabled"] and not st["enabled"]:
            steps.append(Step(["systemctl", "enable", name], f"enable {name}"))
        elif not want["enabled"] and st["enabled"]:
            steps.append(Step(["systemctl", "disable", name], f"disable {name}"))
        stale = unreachable(obs)
        if want["active"] and stale:
            # systemd calls it active, so `start` would do nothing: mount it again
            steps.append(Step(["systemctl", "restart", name], f"mount {name} again: its root answers {stale!r}"))
        elif want["active"] and not st["active"]:
            steps.append(Step(["systemctl", "start", name], f"start {name}"))
        elif want["active"] and changed:
            steps.append(Step(["systemctl", "restart", name], f"restart {name} on new unit files"))
        elif not want["active"] and st["active"]:
            steps.append(Step(["systemctl", "stop", name], f"stop {name}"))
        if not steps and st["live"] != want["live"]:
            # Files and states match yet the live manager disagrees: a restart cannot
            # fix a property the unit does not declare, so report it (not converged).
            bad = {k: (st["live"].get(k), v) for k, v in want["live"].items() if st["live"].get(k) != v}
            steps.append(Step(["systemctl", "restart", name],
                              "live properties differ: " + ", ".join(
                                  f"{k}={have} (want {w})" for k, (have, w) in bad.items())))
        return steps

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        base = super().diff.__wrapped__(self, _id, olds, news)
        if (olds.get("triggers") or {}) != (news.get("triggers") or {}):
            return DiffResult(changes=True, replaces=base.replaces, stables=[],
                              delete_before_replace=True)
        return base

    def applied(self, props: Props, record: Props, before: Observed, after: Observed,
                ran: list[Step]) -> Props:
        started = any(list(s.argv[:2]) in (["systemctl", "start"], ["systemctl", "restart"]) for s in ran)
        return {**super().applied(props, record, before, after, ran), _STARTED: started}

    def _restart_for_triggers(self, props: Props, outs: Props, triggered: bool) -> Props:
        """A running unit whose restart triggers call for it is restarted once, since what the
        daemon loaded before (another key, another config) is unknown; not when the apply
        itself (re)started it: that start loaded what is there now."""
        started = outs.pop(_STARTED, False)
        if not triggered or not wanted_active(props) or started:
            return outs
        conn = self._conn(props)
        read = run_steps(conn, [Step(["systemctl", "restart", props["name"]], "restart for its triggers")],
                         then=self.probe_argv(props))
        assert read is not None  # run_steps returns `then`'s result
        return {**outs, **self.state(props, self.parse(props, read.stdout))}

    @_entry
    def create(self, props: Props) -> CreateResult:
        """Apply; a unit with restart triggers is restarted once unless the apply started it (a
        daemon's first start is its only one)."""
        res = super().create.__wrapped__(self, props)
        return CreateResult(id_=res.id, outs=self._restart_for_triggers(props, res.outs, bool(props.get("triggers"))))

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        """Apply, then restart a running unit whose restart triggers (e.g. a key's hash) changed,
        unless the apply (re)started it already."""
        outs = super().update.__wrapped__(self, _id, olds, news).outs
        changed = (olds.get("triggers") or {}) != (news.get("triggers") or {})
        return UpdateResult(outs=self._restart_for_triggers(news, outs, changed))

    def plan_delete(self, props: Props, obs: Observed) -> list[Step]:
        name = props["name"]
        steps: list[Step] = []
        show = obs["show"]
        if not props.get("was_active") and show.get("ActiveState") == "active":
            steps.append(Step(["systemctl", "stop", name], f"stop {name}"))
        if not props.get("was_enabled") and show.get("UnitFileState") == "enabled":
            steps.append(Step(["systemctl", "disable", name], f"disable {name}"))
        written = [p for p in unit_paths(props) if obs["files"].get(p) is not None]
        if written:
            steps.append(Step(["rm", "-f", "--", *written], "remove unit files"))
            dropin_dir = f"{UNIT_DIR}/{name}.d"
            if props.get("dropins"):
                steps.append(Step(sh('rmdir -- "$1" 2>/dev/null || true', dropin_dir), "remove drop-in dir"))
            steps.append(Step(["systemctl", "daemon-reload"], "unit files removed"))
        if props.get("was_active") and show.get("ActiveState") != "active":
            steps.append(Step(["systemctl", "start", name], f"restart {name} as before"))
        return steps


class SystemdUnit(Resource, module="host", name="SystemdUnit"):
    """A systemd unit on one host: files, enablement, activity and live properties.

    `active`: True (started, restarted on new files), False (stopped) or None (a oneshot its
    timer starts: never started, stopped or restarted here). `triggers`: values (such as hashes
    of files the daemon reads) whose change restarts the running unit."""

    live: pulumi.Output[dict]
    active: pulumi.Output[Optional[bool]]

    def __init__(self, name: str, *, conn: dict, unit: str, content: Optional[str] = None,
                 dropins: Optional[dict[str, str]] = None, enabled: pulumi.Input[bool] = True,
                 active: pulumi.Input[Optional[bool]] = True,
                 properties: Optional[dict[str, str]] = None,
                 triggers: Optional[pulumi.Input[dict]] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(
            SystemdUnitProvider(), name,
            {"conn": conn, "name": unit, "content": content, "dropins": dropins or {},
             "enabled": enabled, "active": BY_TIMER if active is None else active,
             "properties": properties or {},
             "triggers": triggers or {},
             "files": None, "live": None},
            opts,
        )
