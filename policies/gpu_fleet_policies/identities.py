"""Service identities: `slurm` and `munge` have one fixed uid and gid on every host.

MUNGE and Slurm compare numeric ids across hosts: a node whose `slurm` user has another
uid cannot read the spool on shared storage or decode credentials (the seed's four identity
failures). A stack policy, because it compares Account resources across hosts.
"""

from __future__ import annotations

from collections import defaultdict

from . import props as P
from .common import stack_resources

SERVICE_ACCOUNTS = ("slurm", "munge")


def validate_service_ids(args, report_violation) -> None:
    accounts = stack_resources(args, P.ACCOUNT)
    by_user: dict[str, list] = defaultdict(list)
    for res in accounts:
        user = res.get("name")
        if P.is_unknown(user):
            continue
        user = P.text(user)
        if user in SERVICE_ACCOUNTS:
            by_user[user].append(res)

    for user in SERVICE_ACCOUNTS:
        seen: dict[str, defaultdict[int, list]] = {"uid": defaultdict(list), "gid": defaultdict(list)}
        for res in by_user.get(user, []):
            host = P.host_of(res.props) or "an unnamed host"
            for key in ("uid", "gid"):
                raw = res.get(key)
                if P.is_unknown(raw):
                    continue  # not known during preview; checked again before `up` applies it
                value = P.as_int(raw)
                if value is None:
                    report_violation(
                        f'Account "{res.name}" ({user} on {host}) has no fixed {key} '
                        f"(got {P.reveal(raw)!r}); set {key} to the stack's fixed number "
                        f"(gpu-fleet:slurm.{user}_{key}).", res.urn or None)
                    continue
                seen[key][value].append((res, host))
        for key in ("uid", "gid"):
            values = seen[key]
            if len(values) <= 1:
                continue
            # The most common value is the reference; every other one is named.
            ref = max(values, key=lambda v: (len(values[v]), -v))
            ref_names = sorted(h for _, h in values[ref])
            ref_hosts = (ref_names[0] + " gives" if len(ref_names) == 1
                         else ", ".join(ref_names[:-1]) + f" and {ref_names[-1]} give")
            for value, items in sorted(values.items()):
                if value == ref:
                    continue
                for res, host in items:
                    report_violation(
                        f'Account "{res.name}" gives {user} {key} {value} on {host}, but '
                        f"{ref_hosts} it {key} {ref}; set the same {key} on every host "
                        f"(gpu-fleet:slurm.{user}_{key}).", res.urn or None)
