"""The model snapshot: one pinned commit, a private token, no download at boot.

Checked on the model snapshot layer's resources on the storage host:

- the `model:Snapshot` resource: its `revision` is a 40-hex commit id (lower case, as the hub
  names commits); a branch or a tag is a name the hub can move, so two rollouts of the same
  stack would publish different weights under one path;
- the hub token File (`TOKEN`): its content is a Pulumi secret, the File is declared
  `secret=True` and readable by its owner only (0600);
- the downloader's SystemdUnit (`UNIT`): never enabled, so a boot of the storage host does
  not start a download of up to hundreds of GB behind the rollout's back (only `pulumi up`'s
  Snapshot starts it).

The constants mirror components/layers/model_snapshot/render.py (the pack does not import the
program; tests/policy/test_model_policies.py holds them equal).
"""

from __future__ import annotations

import re

from . import props as P
from .common import resource

SNAPSHOT = "pulumi-python:dynamic/model:Snapshot"
#: render.TOKEN, render.UNIT
TOKEN = "/etc/gpu-fleet/model-snapshot.token"
UNIT = "gpu-fleet-model-download.service"
_COMMIT = re.compile(r"[0-9a-f]{40}")


def validate_revision_pinned(args, report_violation) -> None:
    res = resource(args, SNAPSHOT)
    if res is None:
        return
    rev = res.get("revision")
    if P.is_unknown(rev):
        return
    value = P.text(rev)
    if value is not None and _COMMIT.fullmatch(value):
        return
    repo = P.text(res.get("repo_id")) or "?"
    shown = "no revision" if value is None else f"revision {value!r}"
    why = ("which has upper-case hex digits (the hub names commits in lower case)"
           if value is not None and re.fullmatch(r"[0-9A-Fa-f]{40}", value)
           else "which is not a 40-hex commit id: a branch or a tag is a name the hub can move, so "
                "the same stack would publish other weights under the same path")
    report_violation(
        f"{res.describe('Snapshot', repo)} has {shown}, {why}; set gpu-fleet:model_snapshot.revision "
        "to the 40-hex commit id the revision resolves to today.", None)


def validate_token_secret(args, report_violation) -> None:
    res = resource(args, P.FILE)
    if res is None or P.path_of(res.props) != TOKEN:
        return
    who = res.describe("File", TOKEN)
    content = res.get("content")
    if not (P.is_secret(content) or P.is_unknown(content) or content is None):
        report_violation(
            f"{who} holds the hub token as a plain string, which Pulumi would store unencrypted in "
            "the state; set it with `pulumi config set --secret gpu-fleet:hf_token` and pass it as "
            "a Pulumi secret.", None)
    flag = res.get("secret")
    if not P.is_unknown(flag) and P.reveal(flag) is not True:
        report_violation(
            f"{who} holds the hub token but is not declared secret=True, so it would not be masked "
            "in command logs; set secret=True.", None)
    mode = res.get("mode")
    if not P.is_unknown(mode) and not _owner_only(P.reveal(mode) or "0644"):  # None: the File default
        report_violation(f"{who} holds the hub token but its mode {P.reveal(mode) or '0644'} lets other "
                         "users read it; set mode to 0600.", None)


def _owner_only(mode) -> bool:
    """An octal mode without group or other bits ('0600', '400'); anything unreadable is not."""
    return bool(re.fullmatch(r"[0-7]{1,4}", str(mode))) and not int(str(mode), 8) & 0o077


def validate_not_at_boot(args, report_violation) -> None:
    res = resource(args, P.SYSTEMD_UNIT)
    if res is None or P.text(res.get("name")) != UNIT:
        return
    enabled = res.get("enabled")
    if P.is_unknown(enabled):
        return
    value = P.reveal(enabled)
    if value is False:
        return
    if value is True:
        shown = "is enabled"
    elif value is None:
        shown = "does not declare enabled=False (a SystemdUnit is enabled by default)"
    else:
        shown = f"has enabled={value!r}"
    report_violation(
        f"{res.describe('SystemdUnit', UNIT)} {shown}: a boot of the storage host would start a "
        "model download outside any rollout; declare it with enabled=False (the layer's Snapshot "
        "starts it during `pulumi up`).", None)
