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
import subprocess
import sys
from typing import Callable

from .config import PROJECT
from .errors import ConfigError

#: key -> (generator, what it is)
STACK_SECRETS: dict[str, tuple[Callable[[], str], str]] = {
    "munge_key": (lambda: base64.b64encode(secrets.token_bytes(1024)).decode(), "MUNGE key"),
    "db_password": (lambda: secrets.token_urlsafe(32), "slurm database password"),
    "jwt_key": (lambda: base64.b64encode(secrets.token_bytes(48)).decode(), "slurmrestd JWT signing key"),
}


def required_secret(key: str, source: str):
    """The secret's Output in a running program; refuses a missing or plain-text value."""
    import pulumi
    from pulumi.runtime.config import is_config_secret

    full = f"{PROJECT}:{key}"
    value = pulumi.Config(PROJECT).get_secret(key)
    if value is None:
        raise ConfigError(source, [f"{full}: missing; run `make stack STACK=<stack>` to generate it"])
    if not is_config_secret(full):
        raise ConfigError(source, [f"{full}: stored in plain text; set it with `pulumi config set --secret`"])
    return value


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
        subprocess.run([pulumi, "config", "set", "--stack", stack, "--secret", full],
                       input=gen(), cwd=cwd, text=True, check=True, capture_output=True)
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
