"""Account: a user and its group with fixed numeric ids.

MUNGE and Slurm compare numeric ids across hosts; the seed's four identity
failures all came from drift here. So ids are fixed in the stack, and an
existing name with another id (or an id taken by another name) is an error
that names both: gpu-fleet never renumbers an account, since files on shared
storage would silently change owner.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from ..scripts import script
from ..kit import sh
from .base import HostPrimitive
from .parts import Observed, PlanRefused, Props, Step

_PROBE = script(__file__, "account_probe.sh")


def _passwd(line: str) -> Optional[dict]:
    f = line.split(":")
    if len(f) < 7:
        return None
    return {"name": f[0], "uid": int(f[2]), "gid": int(f[3]), "home": f[5], "shell": f[6]}


def _group(line: str) -> Optional[dict]:
    f = line.split(":")
    if len(f) < 3:
        return None
    return {"name": f[0], "gid": int(f[2])}


def _by_key(entries: list[dict], name: Optional[str], num: str, value: Optional[int]) -> tuple:
    """getent prints the entry of each key it finds, in key order: the name's, then the id's."""
    first = entries[0] if entries and entries[0]["name"] == name else None
    rest = entries[1:] if first is not None else entries
    return first, next((e for e in rest if e[num] == value), None)


def parse_account_probe(stdout: str, name: str, uid: int, gid: int) -> Observed:
    """{'user': the passwd entry of `name`, 'uid': the one getent finds for `uid`, 'group' and
    'gid' the same in group}, each None when there is none, from the probe's "== passwd" and
    "== group" sections."""
    found: dict[str, list[dict]] = {"passwd": [], "group": []}
    section = None
    for line in stdout.splitlines():
        if line.startswith("== "):
            section = line[3:].strip()
        elif section in found:
            e = (_passwd if section == "passwd" else _group)(line.strip())
            if e is not None:
                found[section].append(e)
    user, by_uid = _by_key(found["passwd"], name, "uid", uid)
    group, by_gid = _by_key(found["group"], name, "gid", gid)
    return {"user": user, "group": group, "uid": by_uid, "gid": by_gid}


class AccountProvider(HostPrimitive):
    replace_on = ("name",)
    record_keys = ("created_user", "created_group")

    def key(self, props: Props) -> str:
        return f"account:{props['name']}"

    def probe_argv(self, props: Props) -> list[str]:
        return sh(_PROBE, props["name"], str(props["uid"]), str(props["gid"]))

    def parse(self, props: Props, stdout: str) -> Observed:
        return parse_account_probe(stdout, props["name"], int(props["uid"]), int(props["gid"]))

    def desired(self, props: Props) -> dict[str, Any]:
        return {"uid": props["uid"], "gid": props["gid"], "home": props["home"], "shell": props["shell"]}

    def state(self, props: Props, obs: Observed) -> dict[str, Any]:
        u = obs.get("user") or {}
        g = obs.get("group") or {}
        return {"uid": u.get("uid"), "gid": g.get("gid") if g else None,
                "home": u.get("home"), "shell": u.get("shell")}

    def remember(self, props: Props, before: Observed) -> Props:
        return {"created_user": before.get("user") is None, "created_group": before.get("group") is None}

    def conflicts(self, props: Props, obs: Observed, host: str = "") -> list[str]:
        name, uid, gid = props["name"], props["uid"], props["gid"]
        out = []
        u, g = obs.get("user"), obs.get("group")
        if u and u["uid"] != uid:
            out.append(f"user {name} exists with uid {u['uid']}, the stack fixes uid {uid}")
        if g and g["gid"] != gid:
            out.append(f"group {name} exists with gid {g['gid']}, the stack fixes gid {gid}")
        if obs.get("uid") and obs["uid"]["name"] != name:
            out.append(f"uid {uid} already belongs to user {obs['uid']['name']}")
        if obs.get("gid") and obs["gid"]["name"] != name:
            out.append(f"gid {gid} already belongs to group {obs['gid']['name']}")
        return out

    def plan(self, props: Props, obs: Observed, record: Props) -> list[Step]:
        bad = self.conflicts(props, obs)
        if bad:
            raise PlanRefused(
                "account " + props["name"] + ": " + "; ".join(bad)
                + ". gpu-fleet never renumbers accounts: fix the host or the stack's ids."
            )
        name: str = props["name"]
        steps: list[Step] = []
        if obs.get("group") is None:
            steps.append(Step(["groupadd", "--system", "-g", str(props["gid"]), name], f"group {name}"))
        u = obs.get("user")
        if u is None:
            steps.append(Step(["useradd", "--system", "-u", str(props["uid"]), "-g", str(props["gid"]),
                               "-d", props["home"], "-M", "-s", props["shell"], "-c", props.get("comment", name),
                               name], f"user {name}"))
        else:
            if u["home"] != props["home"]:
                steps.append(Step(["usermod", "-d", props["home"], name], f"home of {name}"))
            if u["shell"] != props["shell"]:
                steps.append(Step(["usermod", "-s", props["shell"], name], f"shell of {name}"))
            if u["gid"] != props["gid"]:
                steps.append(Step(["usermod", "-g", str(props["gid"]), name], f"primary group of {name}"))
        return steps

    def plan_delete(self, props: Props, obs: Observed) -> list[Step]:
        name = props["name"]
        steps = []
        if props.get("created_user") and obs.get("user"):
            steps.append(Step(["userdel", name], f"remove user {name}"))
        if props.get("created_group") and obs.get("group"):
            # userdel may already have removed the user's own group (USERGROUPS_ENAB).
            steps.append(Step(sh('if getent group "$1" >/dev/null; then groupdel "$1"; fi', name),
                              f"remove group {name}"))
        return steps


class Account(Resource, module="host", name="Account"):
    """A system user and same-named group with fixed numeric uid/gid on one host."""

    uid: pulumi.Output[int]
    gid: pulumi.Output[int]

    def __init__(self, name: str, *, conn: dict, user: str, uid: int, gid: int,
                 home: str = "/nonexistent", shell: str = "/usr/sbin/nologin",
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(
            AccountProvider(), name,
            {"conn": conn, "name": user, "uid": uid, "gid": gid, "home": home, "shell": shell},
            opts,
        )
