"""Checked string types every layer's model uses, and the strict base model.

Every string that reaches a shell, a path, SQL or a `.conf` file passes through one of these:
no newline or control character, and a strict pattern saying what is allowed; the message says
what is allowed and never quotes more than 64 characters of the refused value.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Callable, Union

from pydantic import AfterValidator, BaseModel, ConfigDict

#: C0 and C1 control characters and DEL: a newline ends a .conf line or a shell command
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(v: str) -> str:
    """A refused value as messages show it: quoted, escapes visible, cut when long."""
    r = repr(v)
    return r if len(r) <= 64 else r[:60] + "...'"


def checked(what: str, ok: Union[str, Callable[[str], bool]]) -> Any:
    """A str type that refuses control characters and anything `ok` (a full-match regex or a
    predicate) does not accept; `what` says what is allowed."""
    rx = re.compile(ok) if isinstance(ok, str) else None

    def check(v: str) -> str:
        if _CONTROL.search(v):
            raise ValueError(f"{shown(v)} contains a newline or another control character; "
                             f"expected {what}")
        if not (rx.fullmatch(v) if rx else callable(ok) and ok(v)):
            raise ValueError(f"{shown(v)} is not {what}")
        return v

    return Annotated[str, AfterValidator(check)]


def _clean_path(p: str, chars: str) -> bool:
    """Only `chars` (a regex class body), at most 1024 of them, and no `..` segment."""
    return (0 < len(p) <= 1024 and re.fullmatch(f"[{chars}]+", p) is not None
            and ".." not in p.split("/"))


_DNS_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _is_address(v: str) -> bool:
    """An IP address (no IPv6 zone) or a DNS name."""
    if "%" in v:
        return False
    try:
        ipaddress.ip_address(v)
        return True
    except ValueError:
        pass
    labels = v.rstrip(".").split(".")
    return 0 < len(v) <= 253 and all(_DNS_LABEL.fullmatch(x) for x in labels)


_USER_RX = r"[a-z_][a-z0-9_-]{0,31}"
_JUMP = re.compile(rf"(?:{_USER_RX}@)?(\[[0-9A-Fa-f:.]+\]|[^@:\[\]]+)(?::([0-9]{{1,5}}))?")


def _is_jump(v: str) -> bool:
    """ssh's ProxyJump: [user@]host[:port], comma-separated; an IPv6 host in brackets."""
    for hop in v.split(","):
        m = _JUMP.fullmatch(hop)
        if not m or (m.group(2) and not 1 <= int(m.group(2)) <= 65535):
            return False
        host = m.group(1)
        if not _is_address(host[1:-1] if host.startswith("[") else host):
            return False
    return True


HostName = checked("a name: a lowercase letter, then lowercase letters, digits or '-' "
                   "(at most 63 characters)", r"[a-z][a-z0-9-]{0,62}")
UserName = checked("a POSIX user name: a lowercase letter or '_', then lowercase letters, digits, "
                   "'_' or '-' (at most 32 characters)", _USER_RX)
Address = checked("an IP address (without an IPv6 zone) or a DNS name (labels of letters, digits "
                  "and '-', at most 253 characters)", _is_address)
RemotePath = checked("an absolute path of letters, digits and . _ + - / (no spaces, no '..')",
                     lambda v: v.startswith("/") and _clean_path(v, "A-Za-z0-9._+/-"))
DevicePrefix = checked("a device path prefix under /dev/ of letters, digits and _ - / (/dev/nvidia)",
                       r"/dev/[A-Za-z0-9_/-]+")
LocalPath = checked("a path on this machine (absolute, ~/..., or relative to the project root) of "
                    "letters, digits and . _ + @ - / (no spaces, no '..')",
                    lambda v: _clean_path(v.removeprefix("~/"), "A-Za-z0-9._+@/-"))
ProxyJump = checked("ssh jump hosts: [user@]host[:port], comma-separated (an IPv6 host in brackets)",
                    _is_jump)
DottedVersion = checked("a version of digits and dots (580.173.02)", r"[0-9]{1,9}(\.[0-9]{1,9}){1,5}")
DebianVersion = checked("a Debian package version: an optional epoch ('1:'), a digit, then letters, "
                        "digits and . + ~ - (26.05.4-1+v1001; at most 100 characters)",
                        r"(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]{0,99}")
Sha256 = checked("a SHA-256 digest: 64 lowercase hex digits", r"[0-9a-f]{64}")
GresRequest = checked("a GRES request: name[:type]:count (gpu:v100:8)",
                      r"[a-z]{1,32}(:[a-z0-9_]{1,32})?:[0-9]{1,4}")
GresType = checked("a GRES type: lowercase letters, digits and '_' (v100; at most 32 characters)",
                   r"[a-z0-9_]{1,32}")
CgroupController = checked("a cgroup controller name: lowercase letters, digits and '_' "
                           "(cpu, memory, io, pids)", r"[a-z][a-z0-9_]{0,31}")
SqlName = checked("a database identifier: letters, digits and '_' (at most 32 characters)",
                  r"[A-Za-z0-9_]{1,32}")
SlurmTime = checked("a Slurm time limit: minutes, minutes:seconds, hours:minutes:seconds, "
                    "days-hours, days-hours:minutes, days-hours:minutes:seconds, INFINITE or UNLIMITED",
                    r"INFINITE|UNLIMITED|[0-9]{1,9}(:[0-9]{1,2}){0,2}|[0-9]{1,9}-[0-9]{1,2}(:[0-9]{1,2}){0,2}")
ZfsName = checked("a ZFS pool or dataset name: pool[/child...], each part a letter or digit, then "
                  "letters, digits and _ - . : (ai/models)",
                  r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}(/[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}){0,8}")
PackageName = checked("a Debian package name: a lowercase letter or digit, then lowercase letters, "
                      "digits and + - . (nfs-ganesha)", r"[a-z0-9][a-z0-9+.-]{1,99}")
DirName = checked("a directory name: letters, digits and _ - . (not '.' or '..')",
                  r"(?!\.\.?$)[A-Za-z0-9_.-]{1,64}")
HubRepoId = checked("a Hugging Face repository id: owner/name, each a letter or digit, then letters, "
                    "digits and _ . - (at most 96 characters each; no '--' or '..')",
                    r"(?!.*(--|\.\.))[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def _is_commit(v: str) -> bool:
    if re.fullmatch(r"[0-9a-f]{40}", v):
        return True
    if re.fullmatch(r"[0-9A-Fa-f]{40}", v):
        raise ValueError(f"{shown(v)} has upper-case hex digits; the hub names commits in lower case")
    raise ValueError(f"{shown(v)} is a branch, a tag or a short id, which the hub can move or "
                     "reuse; pin the 40-hex commit id it resolves to today (the hub shows it as the "
                     "revision's commit)")


CommitId = checked("a 40-hex commit id", _is_commit)
UnitName = checked("a systemd service unit name (k3s.service)", r"[A-Za-z0-9@_.:-]{1,240}\.service")
ChangeId = checked("a change ID: a lowercase letter or digit, then lowercase letters, digits and . _ - "
                   "(at most 64 characters)", r"[a-z0-9][a-z0-9._-]{0,63}")
KubeResource = checked("a Kubernetes resource as kubectl names it: plural, optionally with its API "
                       "group (deployments.apps, cronjobs.batch, configmaps)",
                       r"[a-z][a-z0-9-]{0,62}(\.[a-z0-9][a-z0-9-]{0,62})*")
HubPattern = checked("a file pattern (fnmatch) of letters, digits and . _ - / * ? [ ] (at most 200)",
                     r"[A-Za-z0-9._/*?\[\]-]{1,200}")


def _is_endpoint(v: str) -> bool:
    if re.fullmatch(r"https?://[^/]*@.*", v):
        # never quote the value: it holds a password
        raise ValueError("holds credentials (user:password@); give the hub token as the secret "
                         "gpu-fleet:hf_token instead")
    return re.fullmatch(r"https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~/-]*)?", v) is not None and len(v) <= 300


HttpEndpoint = checked("an http(s) URL without credentials, query or spaces (https://huggingface.co, "
                       "http://10.0.0.5:8900)", _is_endpoint)
RelativeFile = checked("a file path inside the snapshot: parts of letters, digits and . _ - joined by '/' "
                       "(no glob characters, no '..', not absolute)",
                       lambda v: not v.startswith("/") and _clean_path(v, "A-Za-z0-9._/-")
                       and "" not in v.split("/"))
ImageRef = checked("an image by digest: [registry[:port]/]path@sha256:<64 lowercase hex> (never a tag)",
                   r"[a-z0-9][a-z0-9._-]*(:[0-9]{1,5})?(/[a-z0-9][a-z0-9._-]*)+@sha256:[0-9a-f]{64}")
Registry = checked("a registry host[:port] (storage:5000)", r"[a-z0-9][a-z0-9.-]{0,252}(:[0-9]{1,5})?")
CheckName = checked("a check name: a lowercase letter, then lowercase letters, digits, '_' or '-' "
                    "(at most 32 characters)", r"[a-z][a-z0-9_-]{0,31}")
Text = checked("printable text on one line (at most 200 characters, no control characters)",
               lambda v: 0 < len(v) <= 200 and v.isprintable())


#: where Tailscale addresses its nodes (CGNAT range and its IPv6 ULA prefix)
TAILNET_NETS = (ipaddress.ip_network("100.64.0.0/10"), ipaddress.ip_network("fd7a:115c:a1e0::/48"))


def _in_tailnet(v: str) -> bool:
    try:
        return any(ipaddress.ip_address(v) in n for n in TAILNET_NETS)
    except ValueError:
        return False


TailnetAddress = checked("a tailnet address (an IP address in 100.64.0.0/10 or fd7a:115c:a1e0::/48)", _in_tailnet)


class Strict(BaseModel):
    """Unknown fields are errors: a typo must not silently fall back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
        return True
    except ValueError:
        return False



def _is_web_url(v: str) -> bool:
    """http(s)://host[:port][/path]: an address as Address takes it (an IPv6 one in brackets)."""
    m = re.fullmatch(r"https?://(\[[0-9A-Fa-f:.]+\]|[^/:\[\]]+)(?::([0-9]{1,5}))?(/[A-Za-z0-9._~/-]*)?", v)
    if not m or (m.group(2) and not 1 <= int(m.group(2)) <= 65535):
        return False
    host = m.group(1)
    return _is_address(host[1:-1] if host.startswith("[") else host)


WebUrl = checked("an http:// or https:// URL: host (an IPv6 address in brackets), an optional port and "
                 "path of letters, digits and . _ ~ - /", _is_web_url)
