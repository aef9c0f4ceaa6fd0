"""Recorded state stays usable on real hosts (issue 17, part 5): the case the issue met, an
`Account` whose recorded outputs had lost `uid` after a refresh of a host where the account
was gone, so every later refresh died with `KeyError: 'uid'` in Account.probe_argv. Here the
canary account (and its group) is removed by hand on node2, then refreshed twice, rolled
out, and refreshed again: every step works from what the one before recorded. The account is
a member of node2's `Accounts` bundle (issue 16), whose outputs keep each member's inputs
apart from its observed state."""

from __future__ import annotations

import json

from tests.pulumi_cli import PulumiProject

from .labhosts import ssh

USER = "fleetcanary"


def canary_account(proj: PulumiProject) -> dict:
    """The canary member of node2's accounts: its recorded inputs, observed state and record."""
    state = json.loads(proj.run("stack", "export", "--stack", "lab").stdout)
    outs = next(r for r in state["deployment"]["resources"] if r["urn"].endswith("::node2-accounts"))["outputs"]
    member = next(m for m in outs["members"] if m["name"] == USER)
    key = f"account:{USER}"
    return {"inputs": member, "state": outs["state"][key], "record": outs["records"][key]}


def test_an_account_removed_by_hand_refreshes_twice_and_converges(deployed, tmp_path):
    proj = deployed.project(tmp_path)
    uid = canary_account(proj)["state"]["uid"]
    ssh("node2", f"userdel {USER}; getent group {USER} >/dev/null && groupdel {USER}; true")
    for _ in range(2):  # a refresh of the absent account, then one from what it recorded
        r = proj.refresh(check=False, timeout=900)
        assert r.returncode == 0 and "KeyError" not in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
        acct = canary_account(proj)
        # the stack's values the next probe reuses, and what create made (to undo), kept
        assert acct["inputs"]["uid"] == uid and acct["inputs"]["name"] == USER, acct
        assert acct["state"]["uid"] is None and "created_user" in acct["record"], acct
    proj.up(timeout=1200)
    assert ssh("node2", f"id -u {USER}").stdout.strip() == str(uid)
    proj.refresh(timeout=900)
    proj.run("preview", "--stack", "lab", "--expect-no-changes")
