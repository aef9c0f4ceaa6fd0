"""Per-stack secrets (MUNGE key, ...): generated once, kept as Pulumi secrets in the stack.

They live in the stack's config, encrypted by the stack's secrets provider, so
`pulumi destroy` followed by `up` restores the same cluster with the same key,
and nothing ever regenerates them behind the admin's back. `ensure` (run by
`make stack`) creates only the missing ones, passing values on stdin so they
never appear in a process list.

    python -m components.stack_secrets ensure <stack> [--cwd DIR] [--pulumi bin/pulumi]
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import re
import subprocess
import sys
from typing import Callable, Optional

from .config.project import PROJECT, stack_file
from .errors import ConfigError

#: key -> (generator, what it is)
STACK_SECRETS: dict[str, tuple[Callable[[], str], str]] = {
    "munge_key": (lambda: base64.b64encode(secrets.token_bytes(1024)).decode(), "MUNGE key"),
    "db_password": (lambda: secrets.token_urlsafe(32), "slurm database password"),
    "jwt_key": (lambda: base64.b64encode(secrets.token_bytes(48)).decode(), "slurmrestd JWT signing key"),
}


#: what a database password may not contain, and why: it is written as `StoragePass=<value>`
#: into slurmdbd.conf and set in MariaDB from inside an SQL string literal
_DB_PASSWORD_REFUSED = (
    (r"[\x00-\x1f\x7f-\x9f]", "a newline or another control character (it would end the "
                              "StoragePass= line of slurmdbd.conf)"),
    (r"\s", "white space (slurmdbd.conf ends an unquoted value there)"),
    (r"#", "'#' (slurmdbd.conf reads the rest of the line as a comment)"),
    (r'"', "'\"' (slurmdbd.conf reads it as quoting)"),
    (r"\\", "'\\' (Slurm's config parser strips it as an escape, so slurmdbd would read another password)"),
)


def db_password_problem(value: str) -> Optional[str]:
    """Why a database password cannot be used, or None; the reason never quotes the value."""
    if not value:
        return "is empty"
    return next((f"contains {why}" for rx, why in _DB_PASSWORD_REFUSED if re.search(rx, value)), None)


#: key -> why its value cannot be used (None: fine); a reason never includes the value
SECRET_CHECKS: dict[str, Callable[[str], Optional[str]]] = {"db_password": db_password_problem}


def check_secret(key: str, value: str, source: str) -> None:
    """Refuse a secret's value that its consumer cannot take, naming the key, never the value."""
    check = SECRET_CHECKS.get(key)
    problem = check(value) if check else None
    if problem:
        raise ConfigError(source, [
            f"{PROJECT}:{key}: the value {problem}; set another with `pulumi config set --secret "
            f"{PROJECT}:{key}` (or remove it and run `make stack` to generate one)"])


def optional_secret(key: str, source: str):
    """The secret's Output when the stack sets it (refused in plain text), else None."""
    from pulumi.runtime.config import get_config

    if get_config(f"{PROJECT}:{key}") is None:
        return None
    return required_secret(key, source)


def required_secret(key: str, source: str):
    """The secret's Output in a running program; refuses a missing, plain-text or unusable value
    (before any resource is declared: config values are known in preview)."""
    import pulumi
    from pulumi.runtime.config import get_config, is_config_secret

    full = f"{PROJECT}:{key}"
    value = get_config(full)
    if value is None:
        raise ConfigError(source, [f"{full}: missing; run `make stack STACK=<stack>` to generate it"])
    if not is_config_secret(full):
        raise ConfigError(source, [f"{full}: stored in plain text; set it with `pulumi config set --secret`"])
    check_secret(key, value, source)
    return pulumi.Output.secret(value)


def ensure(stack: str, cwd: str | None = None, pulumi: str = "pulumi") -> list[str]:
    """Generate the stack's missing secrets; returns the keys it created."""
    out = subprocess.run([pulumi, "config", "--stack", stack, "--json"], cwd=cwd,
                         capture_output=True, text=True, check=True).stdout
    have = json.loads(out or "{}")
    created = []
    for key, (gen, _what) in STACK_SECRETS.items():
        full = f"{PROJECT}:{key}"
        if full in have:
            continue
        value = gen()
        check_secret(key, value, stack_file(stack))  # a generated value always passes
        subprocess.run([pulumi, "config", "set", "--stack", stack, "--secret", full],
                       input=value, cwd=cwd, text=True, check=True, capture_output=True)
        created.append(full)
    return created


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="generate a stack's missing secrets")
    ap.add_argument("action", choices=["ensure"])
    ap.add_argument("stack")
    ap.add_argument("--cwd")
    ap.add_argument("--pulumi", default="pulumi", help="the pulumi command (bin/pulumi in this repo)")
    args = ap.parse_args(argv)
    for key in ensure(args.stack, args.cwd, args.pulumi):
        print(f"generated {key} (a Pulumi secret) for stack {args.stack}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
