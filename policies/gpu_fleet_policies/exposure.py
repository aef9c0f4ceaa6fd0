"""Network exposure: the accounting database and the REST API are not on the network.

MariaDB holds the accounting database: it listens on loopback only (slurmdbd runs on the
same host). slurmdbd listens on every address, so its port is closed by an nftables ruleset
to all but its allowed sources. slurmrestd accepts JWTs and runs Slurm commands: it listens
on a Unix socket only, and the web view reaches it through that socket. Checked on the File
and SystemdUnit resources that configure them.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import shlex
from typing import Optional

from . import props as P
from .common import Res, file_content, resource

# ---- MariaDB ------------------------------------------------------------------------------

_SERVER_GROUPS = {"mysqld", "server", "mariadb", "mariadbd", "galera", "embedded"}
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def is_mariadb_config(path: Optional[str]) -> bool:
    if not path or not path.endswith((".cnf", "my.cnf")):
        return False
    return (path.startswith("/etc/mysql/") or path == "/etc/my.cnf"
            or path.startswith("/etc/my.cnf.d/"))


def _is_server_group(name: str) -> bool:
    n = name.strip().lower()
    return n in _SERVER_GROUPS or n.startswith(("mysqld-", "mariadb-", "mariadbd-"))


def parse_cnf(text: str) -> list[tuple[str, str, Optional[str]]]:
    """(group, option, value) for every option line; option names use '-' for '_'."""
    out = []
    group = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or line.startswith("!"):
            continue
        if line.startswith("[") and "]" in line:
            group = line[1:line.index("]")].strip()
            continue
        line = re.split(r"\s+[#;]", line, maxsplit=1)[0]
        if "=" in line:
            k, v = line.split("=", 1)
            v = v.strip().strip("'\"")
            out.append((group, k.strip().lower().replace("_", "-"), v))
        else:
            out.append((group, line.strip().lower().replace("_", "-"), None))
    return out


def is_loopback(address: str) -> bool:
    a = address.strip().strip("[]")
    if a.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(a).is_loopback
    except ValueError:
        return False


def validate_mariadb_loopback(args, report_violation) -> None:
    res = resource(args, P.FILE)
    if res is None:
        return
    path = P.path_of(res.props)
    if not is_mariadb_config(path):
        return
    content = file_content(res)
    if content is None:
        return
    who = res.describe("File", path)
    options = [(g, k, v) for g, k, v in parse_cnf(content) if _is_server_group(g)]
    if not options:
        return  # client-only settings
    skip = [v for _, k, v in options if k == "skip-networking"]
    if skip and (skip[-1] is None or skip[-1].lower() in ("1", "on", "true", "yes")):
        return
    binds = [v for _, k, v in options if k == "bind-address"]
    if not binds:
        group = options[0][0]
        report_violation(
            f"{who} configures the MariaDB server ([{group}]) but does not set bind-address, "
            f"so the server may listen on every interface; add bind-address = 127.0.0.1 to "
            f"[{group}] (or skip-networking).", None)
        return
    value = binds[-1] or ""
    addresses = [a for a in re.split(r"[,\s]+", value) if a]
    exposed = [a for a in addresses if not is_loopback(a)] or ([] if addresses else ["(empty)"])
    if exposed:
        report_violation(
            f"{who} binds the MariaDB server to {value or 'an empty address'}, which is not "
            f"loopback; set bind-address = 127.0.0.1 so only slurmdbd on this host reaches "
            f"the accounting database.", None)


# ---- slurmdbd's firewall ------------------------------------------------------------------

DBD_PORT = "6819"
_DBD_RULE = re.compile(rf"\bdport\s+{DBD_PORT}\b")
_ANY_SOURCE = re.compile(r"(?<![\w.:])(0\.0\.0\.0/0|::/0)(?![\w.:/])")


def validate_slurmdbd_firewall(args, report_violation) -> None:
    """An nftables File that handles slurmdbd's port must end it with a reset or drop for every
    other source, and admit no source without a saddr match or with a /0 one."""
    res = resource(args, P.FILE)
    if res is None:
        return
    path = P.path_of(res.props) or ""
    if not path.endswith(".nft"):
        return
    content = file_content(res)
    if content is None:
        return
    rules = [line.split("#", 1)[0].strip() for line in content.splitlines()]
    rules = [r for r in rules if _DBD_RULE.search(r)]
    if not rules:
        return
    who = res.describe("File", path)
    for r in rules:
        if re.search(r"\baccept\b", r) and not re.search(r"\bsaddr\b", r):
            report_violation(f"{who} accepts slurmdbd's port {DBD_PORT} from every source ({r!r}); "
                             "match the allowed sources with `ip saddr { ... }`.", None)
        elif re.search(r"\baccept\b", r) and (anywhere := _ANY_SOURCE.search(r)):
            report_violation(f"{who} admits {anywhere.group(1)} to slurmdbd's port "
                             f"{DBD_PORT} ({r!r}); list the compute network, not the whole address "
                             "space.", None)
    closing = [r for r in rules if re.search(r"\b(reject|drop)\b", r) and not re.search(r"\bsaddr\b", r)]
    if not closing or rules.index(closing[-1]) != len(rules) - 1:
        report_violation(f"{who} does not end slurmdbd's port {DBD_PORT} with a rule that resets or "
                         f"drops every other source; add `tcp dport {DBD_PORT} reject with tcp reset` "
                         "after the accept rules.", None)


# ---- slurmrestd ---------------------------------------------------------------------------

# slurmrestd options that take a value (the next argument).
_VALUE_OPTS = {"-a", "-d", "-f", "-g", "-s", "-t", "-u", "--max-connections"}
REST_DEFAULTS_FILES = ("/etc/default/slurmrestd", "/etc/sysconfig/slurmrestd")
_VAR = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def _unit_lines(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file, continuation lines joined."""
    out, section, pending = [], "", ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        if "=" in line:
            k, v = line.split("=", 1)
            out.append((section, k.strip(), v.strip()))
    return out


def _environment(value: str) -> dict[str, str]:
    env = {}
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    for w in words:
        if "=" in w:
            k, v = w.split("=", 1)
            env[k] = v
    return env


def listen_problems(argv: list[str], env: dict[str, str]) -> list[str]:
    """Listen arguments of a slurmrestd command line that are not Unix sockets."""
    problems = []
    i = 0
    while i < len(argv):
        a = argv[i]
        m = _VAR.match(a)
        if m:
            name = m.group(1)
            if name not in env:
                problems.append(f"${name}, whose value the unit does not set")
                i += 1
                continue
            try:
                expanded = shlex.split(env[name])
            except ValueError:
                expanded = env[name].split()
            argv = argv[:i] + expanded + argv[i + 1:]
            continue
        if a in _VALUE_OPTS:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        for item in a.split(","):
            if item and not item.startswith("unix:"):
                problems.append(item)
        i += 1
    return problems


def _check_listen_env(env: dict[str, str]) -> list[str]:
    value = env.get("SLURMRESTD_LISTEN")
    if value is None:
        return []
    return [f"SLURMRESTD_LISTEN={value}"] if any(
        x and not x.startswith("unix:") for x in value.split(",")) else []


def _exec_start_commands(lines: list[tuple[str, str, str]]) -> list[str]:
    cmds: list[str] = []
    for section, k, v in lines:
        if section == "Service" and k == "ExecStart":
            if v == "":
                cmds = []
            else:
                cmds.append(v)
    return cmds


def _slurmrestd_argv(cmd: str) -> Optional[list[str]]:
    cmd = cmd.lstrip("-@:+!")
    try:
        words = shlex.split(cmd)
    except ValueError:
        return None
    for i, w in enumerate(words):
        if posixpath.basename(w) == "slurmrestd":
            return words[i + 1:]
    return None


def _unit_texts(res: Res) -> Optional[list[str]]:
    """Unit content then drop-ins in name order; None if any of them is unknown."""
    texts: list[str] = []
    content = res.get("content")
    if P.is_unknown(content):
        return None
    if text := P.text(content):
        texts.append(text)
    dropins = res.get("dropins")
    if P.is_unknown(dropins):
        return None
    dropins = dropins if isinstance(dropins, dict) else {}
    for name in sorted(dropins):
        if P.is_unknown(dropins[name]):
            return None
        t = P.text(dropins[name])
        if t:
            texts.append(t)
    return texts


def validate_slurmrestd_unix_socket(args, report_violation) -> None:
    res = resource(args, P.SYSTEMD_UNIT, P.FILE)
    if res is None:
        return
    if res.type == P.FILE:
        _check_rest_defaults_file(res, report_violation)
        return
    name = P.reveal(res.get("name"))
    if not isinstance(name, str) or not name.startswith("slurmrestd"):
        return
    texts = _unit_texts(res)
    if texts is None:
        return
    lines = [line for t in texts for line in _unit_lines(t)]
    who = res.describe("SystemdUnit", name)
    fix = ("listen on a Unix socket only, for example "
           "ExecStart=/usr/sbin/slurmrestd unix:/run/slurmrestd/slurmrestd.socket")
    if name.endswith(".socket"):
        bad = [v for s, k, v in lines if s == "Socket" and k.startswith("Listen")
               and v and not v.startswith("/")]
        if bad:
            report_violation(f"{who} listens on {', '.join(bad)}; slurmrestd must listen on a "
                             "Unix socket only: set ListenStream=/run/slurmrestd/slurmrestd.socket.",
                             None)
        return
    env: dict[str, str] = {}
    for s, k, v in lines:
        if s == "Service" and k == "Environment":
            env.update(_environment(v))
    problems = _check_listen_env(env)
    cmds = _exec_start_commands(lines)
    if not cmds:
        report_violation(
            f"{who} sets no ExecStart of its own, so the packaged one applies, and it also "
            f"listens on 0.0.0.0:6820; add a drop-in with an empty ExecStart= line followed by "
            f"one that {fix}.", None)
        return
    for cmd in cmds:
        argv = _slurmrestd_argv(cmd)
        if argv is None:
            problems.append(f"an ExecStart that does not run slurmrestd directly ({cmd})")
            continue
        problems += listen_problems(argv, env)
    if problems:
        report_violation(f"{who} makes slurmrestd listen on {', '.join(problems)}; {fix}.", None)


def _check_rest_defaults_file(res: Res, report_violation) -> None:
    path = P.path_of(res.props)
    if path not in REST_DEFAULTS_FILES:
        return
    content = file_content(res)
    if content is None:
        return
    env: dict[str, str] = {}
    for raw in content.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        env.update(_environment(line))
    problems = _check_listen_env(env)
    if "SLURMRESTD_OPTIONS" in env:
        try:
            opts = shlex.split(env["SLURMRESTD_OPTIONS"])
        except ValueError:
            opts = env["SLURMRESTD_OPTIONS"].split()
        problems += listen_problems(opts, {k: v for k, v in env.items() if k != "SLURMRESTD_OPTIONS"})
    if problems:
        report_violation(
            f"{res.describe('File', path)} makes slurmrestd listen on {', '.join(problems)}; "
            "give slurmrestd Unix sockets only (unix:/run/slurmrestd/slurmrestd.socket).", None)
