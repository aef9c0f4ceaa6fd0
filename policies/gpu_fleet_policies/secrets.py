"""Secret files: their content is a Pulumi secret, and the file is private to its owner.

A secret in plain text ends up unencrypted in the state file and in every preview diff.
Secret files are: the MUNGE key, slurmdbd.conf (the database password), the Slurm JWT key,
any File whose content sets a Slurm storage password, and any File declared `secret=True`.
"""

from __future__ import annotations

import posixpath
import re

from . import props as P
from .common import Res, resource
from .slurmconf import parse

_JWT_KEY = re.compile(r"^jwt.*\.(key|pem)$", re.I)


def secret_reason(res: Res) -> str | None:
    """Why a File holds a secret (for the message), or None."""
    path = P.path_of(res.props) or ""
    base = posixpath.basename(path)
    if base == "munge.key":
        return "the MUNGE key"
    if base == "slurmdbd.conf":
        return "slurmdbd.conf, which holds the accounting database password"
    if _JWT_KEY.match(base):
        return "the Slurm JWT key"
    if P.reveal(res.get("secret")) is True:
        return "declared secret=True"
    content = res.get("content")
    if not P.is_unknown(content):
        text = P.text(content)
        if text and base.endswith(".conf"):
            params = parse(text).params
            for key in ("storagepass", "accountingstoragepass"):
                if params.get(key):
                    return f"it sets {_setting_name(key)}"
    return None


def _setting_name(key: str) -> str:
    return {"storagepass": "StoragePass",
            "accountingstoragepass": "AccountingStoragePass"}.get(key, key)


def _secret_file(args):
    """(the File, why it holds a secret, its path), or None for any other resource."""
    res = resource(args, P.FILE)
    if res is None:
        return None
    why = secret_reason(res)
    if why is None:
        return None
    return res, why, P.path_of(res.props) or "?"


def validate_content_is_secret(args, report_violation) -> None:
    found = _secret_file(args)
    if found is None:
        return
    res, why, path = found
    content = res.get("content")
    if P.is_secret(content) or P.is_unknown(content) or content is None:
        return  # a secret, or not known yet (checked again before `up` applies it), or empty
    report_violation(
        f"{res.describe('File', path)} holds a secret ({why}) but its content is a plain "
        "string, which Pulumi would store unencrypted in the state; pass the content as a "
        "Pulumi secret (pulumi.Output.secret(...) or a secret stack config value).", None)


def validate_private_mode(args, report_violation) -> None:
    found = _secret_file(args)
    if found is None:
        return
    res, why, path = found
    who = res.describe("File", path)
    mode = res.get("mode", "0644")
    if not P.is_unknown(mode):
        raw = P.reveal(mode)
        if raw is None:
            raw = "0644"  # the File default
        try:
            bits = int(str(raw), 8)
        except ValueError:
            bits = None
        if bits is None or bits & 0o077:
            report_violation(
                f"{who} holds a secret ({why}) but its mode {raw} lets other users read it; "
                "set mode to 0600 (or 0400).", None)
    flag = res.get("secret")
    if not P.is_unknown(flag) and P.reveal(flag) is not True:
        report_violation(
            f"{who} holds a secret ({why}) but is not declared secret=True, so its content "
            "would not be masked in command logs; set secret=True.", None)
