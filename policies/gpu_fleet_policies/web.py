"""The web view (issue 15): Slurm-web's agent and gateway as hardened podman containers.

Checked on the web layer's resources (components/layers/web): every `web:Container`
(`CONTAINER`) and the `web:Image` it runs (`IMAGE`):

- the image is pinned by digest (`name@sha256:<64 hex>`, no tag): a tag or `latest` is a name
  the registry can move;
- the container runs as a numeric, non-zero `uid:gid` (a name is resolved in the image's own
  /etc/passwd, 0 is root), with a read-only root filesystem, every capability dropped and
  none added, no-new-privileges, and CPU, memory and PID limits above 0;
- it publishes ports on loopback or on its declared tailnet address only (`tailnet`, an
  address in Tailscale's ranges), never on every interface or a LAN address;
- every mount is read-only; the agent's and the gateway's secrets are directories of their
  own (a stack policy: no component mounts another's secret, or a directory it shares with
  another's);
- no container mounts Slurm's JWT signing key (`jwt_key`), or a directory that holds it, and
  no environment value names it: whoever holds the key mints a token for any Slurm user.

Once the container exists its outputs carry `observed` (read back from `podman inspect` and
the kernel) and `problems` (the layer's own comparison): `web-readback` applies the same rules
to the readback (the image digest it runs, its user, CapEff, NoNewPrivs, cgroup limits, ports,
mounts) and refuses non-empty `problems`. It is a stack policy because only stack policies see
outputs: a resource policy sees the inputs, where the program passes `observed: None`. In a
preview (and `pulumi up`'s own, before anything changes) it sees the state's readback, as the
last create or `--refresh` recorded it, for every container this update leaves as it is; one
the provider is about to update (a drift it repairs) shows its planned inputs, no readback, so
the repair is never refused. A value unknown during preview is skipped; so is `observed`
before the container exists, and a field the readback does not record.

The type tokens are the web layer's (components/layers/web/), and tests/policy/test_web_policies.py
holds them equal to its classes; JWT_KEY is the accounting layer's default key path.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Any, Callable, Iterator, Optional

from . import props as P
from .common import Res, resource, stack_resources

CONTAINER = "pulumi-python:dynamic/web:Container"
IMAGE = "pulumi-python:dynamic/web:Image"
#: Slurm's JWT signing key, when a container does not say where it is
JWT_KEY = "/etc/slurm/jwt_hs256.key"
#: the address ranges Tailscale (and Headscale, by default) hands out
TAILNET_RANGES = (ipaddress.ip_network("100.64.0.0/10"), ipaddress.ip_network("fd7a:115c:a1e0::/48"))
NO_CAPS = "0000000000000000"

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_UID_GID = re.compile(r"([0-9]+):([0-9]+)")
#: words that make a secret source look like a file rather than a directory
_FILE_WORDS = {"token", "key", "jwt", "password", "passwd", "credentials", "cert", "crt", "pem"}

Found = Iterator[str]


# ---- reading a container ----------------------------------------------------------------------

def _known(v: Any) -> bool:
    return not P.contains_unknown(v)


def _not_true(v: Any) -> bool:
    """Known, and not the boolean true (a missing flag is podman's default: off)."""
    return _known(v) and P.reveal(v) is not True


def _who(res: Res, kind: str = "Container") -> str:
    component = P.text(res.get("component")) if _known(res.get("component")) else None
    return res.describe(kind, component or None)


def _observed(res: Res) -> Optional[dict]:
    """The readback, once the container exists (None before, or while unknown)."""
    obs = res.get("observed")
    if P.is_unknown(obs):
        return None
    obs = P.reveal(obs)
    return obs if isinstance(obs, dict) else None


def _policy(declared: Callable[[Res, str], Found], types: tuple[str, ...] = (CONTAINER,)):
    """A resource validator: `declared` on the resource's inputs."""
    def validate(args, report_violation) -> None:
        res = resource(args, *types)
        if res is None:
            return
        for msg in declared(res, _who(res, "Container" if res.type == CONTAINER else "Image")):
            report_violation(msg, None)
    return validate


def _number(v: Any) -> Optional[float]:
    v = P.reveal(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _list(v: Any) -> list:
    """A list's items (as they are: secrets and unknowns kept); [] for anything else."""
    v = v.value if isinstance(v, P.Secret) else v
    return v if isinstance(v, list) else []


def _norm(path: str) -> str:
    return posixpath.normpath("/" + path.lstrip("/")) if path.startswith("/") else posixpath.normpath(path)


def contains(directory: str, path: str) -> bool:
    """`directory` is `path` or one of its parents (whole path components: /etc/slurm holds
    /etc/slurm/jwt_hs256.key, /etc/slur does not)."""
    d, p = _norm(directory), _norm(path)
    return d == p or p.startswith(d.rstrip("/") + "/")


# ---- web-image-by-digest ----------------------------------------------------------------------

def image_problem(ref: Any) -> Optional[str]:
    """Why `ref` is not `name@sha256:<64 hex>` (a clause), or None."""
    if not isinstance(ref, str) or not ref.strip():
        return "which names no image"
    name, at, digest = ref.partition("@")
    if not at:
        tag = name.rsplit("/", 1)[-1].partition(":")[2]
        return (f"which is pinned by the tag {tag!r} only" if tag else
                "which has neither tag nor digest, so it means the tag 'latest'") + \
            ", a name the registry can move"
    if not _DIGEST.fullmatch(digest):
        return (f"whose digest {digest!r} is not sha256: and 64 lower-case hex digits (a short or "
                "upper-case digest is not the registry's content address)")
    if not name or ":" in name.rsplit("/", 1)[-1]:
        return ("which names a tag as well as the digest: podman runs the digest, whatever the tag "
                "says" if name else "which names no repository before the digest")
    return None


def _digest_of(ref: Any) -> Optional[str]:
    ref = P.text(ref)
    if ref is None or image_problem(ref) is not None:
        return None
    return ref.partition("@")[2]


_PIN = ("set it to <registry>/<path>@sha256:<64 hex> with no tag (the digest the registry serves "
        "today; the lab's are in .state/lab/web-images.json)")


def _image_declared(res: Res, who: str) -> Found:
    key = "image" if res.type == CONTAINER else "ref"
    ref = res.get(key)
    if not _known(ref):
        return
    problem = image_problem(P.reveal(ref))
    if problem:
        yield f"{who} has {key} {P.reveal(ref)!r}, {problem}; {_PIN}."


def _image_observed(res: Res, who: str, obs: dict) -> Found:
    got, want = obs.get("image_digest"), _digest_of(res.get("image"))
    if not _known(got) or want is None:
        return
    if P.reveal(got) != want:
        yield (f"{who} runs image digest {P.reveal(got)!r} (observed, podman inspect), not the {want} "
               "its image pins; re-create the container from the pinned digest.")


def _image_pulled(res: Res, who: str) -> Found:
    got, want = res.get("digest"), _digest_of(res.get("ref"))
    if _known(got) and P.reveal(got) is not None and want and P.reveal(got) != want:
        yield (f"{who} pulled digest {P.reveal(got)!r}, not the {want} its ref pins; pull the "
               "pinned digest (the registry must serve exactly that image).")


validate_image_by_digest = _policy(_image_declared, (CONTAINER, IMAGE))


# ---- web-non-root-user -----------------------------------------------------------------------

def user_problem(user: Any) -> Optional[str]:
    """Why `user` is not a numeric non-zero uid:gid (a clause), or None."""
    if user is None or user == "":
        return "so it runs as the image's default user (often root)"
    m = _UID_GID.fullmatch(user) if isinstance(user, str) else None
    if not m:
        return ("which is not a numeric uid:gid (a name is resolved in the image's own /etc/passwd, a "
                "uid alone takes the image's group)")
    zero = [k for k, v in (("uid", m.group(1)), ("gid", m.group(2))) if int(v) == 0]
    if zero:
        return f"whose {' and '.join(zero)} {'is' if len(zero) == 1 else 'are'} 0 (root's)"
    return None


_NON_ROOT = 'set user to a numeric, non-zero uid:gid such as "10001:10001"'


def _user_declared(res: Res, who: str) -> Found:
    user = res.get("user")
    if not _known(user):
        return
    problem = user_problem(P.reveal(user))
    if problem:
        shown = "sets no user" if P.reveal(user) in (None, "") else f"runs as user {P.reveal(user)!r}"
        yield f"{who} {shown}, {problem}; {_NON_ROOT}."


def _user_observed(res: Res, who: str, obs: dict) -> Found:
    got, want = obs.get("user"), res.get("user")
    if not _known(got):
        return
    got = P.reveal(got)
    problem = user_problem(got)
    if problem:
        yield f"{who} runs as user {got!r} (observed, podman inspect), {problem}; {_NON_ROOT}, and re-create it."
    elif _known(want) and user_problem(P.reveal(want)) is None and got != P.reveal(want):
        yield (f"{who} runs as user {got!r} (observed, podman inspect), not the declared "
               f"{P.reveal(want)!r}; re-create the container with its declared user.")


validate_non_root_user = _policy(_user_declared)


# ---- web-read-only-rootfs --------------------------------------------------------------------

_RO_FIX = "set read_only=True (the paths it writes are tmpfs mounts)"


def _rootfs_declared(res: Res, who: str) -> Found:
    ro = res.get("read_only")
    if _not_true(ro):
        yield f"{who} has read_only {P.reveal(ro)!r}, so its root filesystem is writable; {_RO_FIX}."


def _rootfs_observed(res: Res, who: str, obs: dict) -> Found:
    ro = obs.get("read_only")
    if _not_true(ro):
        yield (f"{who} runs with read_only {P.reveal(ro)!r} (observed, podman inspect), so its root "
               f"filesystem is writable; {_RO_FIX} and re-create it.")


validate_read_only_rootfs = _policy(_rootfs_declared)


# ---- web-capabilities-dropped ----------------------------------------------------------------

def _caps_declared(res: Res, who: str) -> Found:
    drop, add = res.get("cap_drop"), res.get("cap_add")
    if _known(drop):
        names = [str(c).strip().upper() for c in _list(drop)]
        if "ALL" not in names:
            yield (f"{who} has cap_drop {P.reveal(drop)!r}, which does not drop ALL, so it keeps "
                   "podman's default capabilities; set cap_drop=[\"ALL\"].")
    if _known(add) and P.reveal(add) not in (None, []):
        yield (f"{who} adds capabilities {P.reveal(add)!r} (cap_add); a web container runs with none "
               "(its ports are above 1024): set cap_add=[].")


def _caps_observed(res: Res, who: str, obs: dict) -> Found:
    eff = obs.get("cap_eff")
    if not _known(eff):
        return
    value = P.reveal(eff)
    try:
        zero = isinstance(value, str) and int(value, 16) == 0
    except ValueError:
        zero = False
    if not zero:
        yield (f"{who} runs with effective capabilities {value!r} (observed CapEff), not {NO_CAPS}; "
               "drop ALL, add none, and re-create it.")


validate_capabilities_dropped = _policy(_caps_declared)


# ---- web-no-new-privileges -------------------------------------------------------------------

_NNP_FIX = "set no_new_privileges=True, so no setuid binary in the image gains privileges"


def _nnp_declared(res: Res, who: str) -> Found:
    v = res.get("no_new_privileges")
    if _not_true(v):
        yield f"{who} has no_new_privileges {P.reveal(v)!r}; {_NNP_FIX}."


def _nnp_observed(res: Res, who: str, obs: dict) -> Found:
    v = obs.get("no_new_privs")
    if _known(v) and P.as_int(v) != 1:
        yield (f"{who} runs with NoNewPrivs {P.reveal(v)!r} (observed, /proc/<pid>/status), not 1; "
               f"{_NNP_FIX}, and re-create it.")


validate_no_new_privileges = _policy(_nnp_declared)


# ---- web-resource-limits ---------------------------------------------------------------------

LIMITS = ("cpus", "memory_mb", "pids")
_LIMITS_FIX = "set limits.cpus, limits.memory_mb and limits.pids to values above 0"


def _limits_declared(res: Res, who: str) -> Found:
    limits = res.get("limits")
    if not _known(limits):
        return
    limits = P.reveal(limits)
    if not isinstance(limits, dict):
        yield f"{who} sets no limits ({limits!r}), so it may take every CPU, all memory and PIDs; {_LIMITS_FIX}."
        return
    bad = [f"{k}={limits.get(k)!r}" for k in LIMITS
           if _known(limits.get(k)) and (_number(limits.get(k)) or 0) <= 0]
    if bad:
        yield (f"{who} has limits {', '.join(bad)}: every web container has a CPU, memory and PID "
               f"limit above 0; {_LIMITS_FIX}.")


def _limits_observed(res: Res, who: str, obs: dict) -> Found:
    keys = ("cpu_quota_us", "cpu_period_us", "memory_limit_bytes", "pids_max")
    bad = [f"{k}={P.reveal(obs.get(k))!r}" for k in keys
           if _known(obs.get(k)) and (_number(obs.get(k)) or 0) <= 0]
    if bad:
        yield (f"{who} runs with {', '.join(bad)} (observed, its cgroup), so a limit is not in force "
               f"(0 or -1 is unlimited); {_LIMITS_FIX} and re-create it.")


validate_limits = _policy(_limits_declared)


# ---- web-ports-loopback-or-tailnet -----------------------------------------------------------

def _ip(v: Any):
    if not isinstance(v, str):
        return None
    try:
        return ipaddress.ip_address(v.strip().strip("[]"))
    except ValueError:
        return None


def tailnet_problem(tailnet: Any) -> Optional[str]:
    ip = _ip(tailnet)
    if ip is None:
        return f"the declared tailnet {tailnet!r} is not an IP address"
    if not any(ip in net for net in TAILNET_RANGES):
        return (f"the declared tailnet {tailnet!r} is not a tailnet address "
                f"({', '.join(str(n) for n in TAILNET_RANGES)})")
    return None


def address_problem(address: Any, tailnet: Any) -> Optional[str]:
    """Why a published port's host address is not allowed (a clause), or None."""
    ip = _ip(address)
    if ip is not None and ip.is_loopback:
        return None
    if address in (None, "") or (ip is not None and ip.is_unspecified):
        return "which is every interface of the host"
    if tailnet not in (None, "") and ip is not None and ip == _ip(tailnet):
        return tailnet_problem(tailnet)
    return "which is neither loopback nor the container's declared tailnet address" + (
        f" ({tailnet})" if tailnet not in (None, "") else " (it declares none)")


def _ports(ports: Any, tailnet: Any, who: str, key: str, observed: bool) -> Found:
    tailnet_known = _known(tailnet)
    tailnet = P.reveal(tailnet) if tailnet_known else None
    for p in _list(ports):
        p = P.reveal(p) if isinstance(P.reveal(p), dict) else {"address": p}
        addr = p.get("address")
        if not _known(addr):
            continue
        addr = P.reveal(addr)
        problem = address_problem(addr, tailnet)
        if problem and not tailnet_known and _ip(addr) is not None and not _ip(addr).is_unspecified:
            continue  # may be the tailnet address, which is not known yet
        if problem:
            shown = "an empty address" if addr in (None, "") else repr(addr)
            port = p.get("host_port")
            port = P.as_int(port) if P.as_int(port) is not None else port
            where = f"{key}, podman inspect" if observed else key
            yield (f"{who} publishes host port {port} on {shown} ({where}), {problem}; publish on "
                   "127.0.0.1 (or ::1), or on the tailnet address declared in tailnet (100.64.0.0/10 or "
                   "fd7a:115c:a1e0::/48).")


def _ports_declared(res: Res, who: str) -> Found:
    yield from _ports(res.get("publish"), res.get("tailnet"), who, "publish", False)


def _ports_observed(res: Res, who: str, obs: dict) -> Found:
    yield from _ports(obs.get("ports"), res.get("tailnet"), who, "observed.ports", True)


validate_ports = _policy(_ports_declared)


# ---- web-mounts-read-only --------------------------------------------------------------------

def _rw_mounts(mounts: Any, who: str, observed: bool) -> Found:
    for m in map(P.reveal, _list(mounts)):
        if not isinstance(m, dict) or not _not_true(m.get("ro")):
            continue
        where = " (observed, podman inspect)" if observed else ""
        yield (f"{who} mounts {m.get('source')!r} at {m.get('target')!r} read-write{where} (ro is "
               f"{P.reveal(m.get('ro'))!r}); every mount of a web container is read-only: set ro=True.")


def _mounts_declared(res: Res, who: str) -> Found:
    yield from _rw_mounts(res.get("mounts"), who, False)


def _mounts_observed(res: Res, who: str, obs: dict) -> Found:
    yield from _rw_mounts(obs.get("mounts"), who, True)


validate_mounts_read_only = _policy(_mounts_declared)


# ---- web-no-jwt-signing-key ------------------------------------------------------------------

def _key_of(res: Res) -> Optional[str]:
    key = res.get("jwt_key")
    if not _known(key):
        return None
    return P.text(key) or JWT_KEY


def _key_mounts(mounts: Any, key: str, who: str, observed: bool) -> Found:
    for m in map(P.reveal, _list(mounts)):
        src = P.text(m.get("source")) if isinstance(m, dict) else None
        if not src or not contains(src, key):
            continue
        what = ("Slurm's JWT signing key" if _norm(src) == _norm(key)
                else f"a directory that holds Slurm's JWT signing key {key}")
        where = " (observed, podman inspect)" if observed else ""
        yield (f"{who} mounts {src} at {m.get('target')!r}{where}, which is {what}: whoever holds the key "
               "mints a token for any Slurm user; mount the component's own secret directory (its token "
               "only), never the key or a directory above it.")


def _key_declared(res: Res, who: str) -> Found:
    key = _key_of(res)
    if key is None:
        return
    yield from _key_mounts(res.get("mounts"), key, who, False)
    env = res.get("env")
    if not isinstance(env, dict):
        return
    for name, value in sorted(env.items()):
        if not _known(value):
            continue
        text = P.reveal(value)
        if isinstance(text, str) and key in text:
            shown = name if P.is_secret(value) else f"{name}={text!r}"
            yield (f"{who} passes the path of Slurm's JWT signing key {key} in its environment "
                   f"({shown}); the web view holds a token only: remove it from env.")


def _key_observed(res: Res, who: str, obs: dict) -> Found:
    key = _key_of(res)
    if key is not None:
        yield from _key_mounts(obs.get("mounts"), key, who, True)


validate_no_signing_key = _policy(_key_declared)


# ---- web-secrets-per-component (stack) -------------------------------------------------------

def looks_like_file(path: str) -> bool:
    """A secret source whose last name looks like a file (`token`, `jwt.key`, `agent-token`)."""
    base = posixpath.basename(_norm(path)).lower()
    if "." in base.lstrip("."):
        return True
    return bool(_FILE_WORDS & set(re.split(r"[-_.]", base)))


def _secret_sources(res: Res) -> Optional[list[str]]:
    mounts = res.get("mounts")
    if P.is_unknown(mounts):
        return None
    out = []
    for m in map(P.reveal, _list(mounts)):
        if isinstance(m, dict) and _known(m.get("source")) and P.reveal(m.get("kind")) == "secret":
            src = P.text(m.get("source"))
            if src:
                out.append(_norm(src))
    return out


def validate_secrets_per_component(args, report_violation) -> None:
    entries = []  # (component, who, source, urn)
    for res in stack_resources(args, CONTAINER):
        comp, sources = res.get("component"), _secret_sources(res)
        if not _known(comp) or sources is None:
            continue
        who = _who(res)
        entries += [(P.text(comp) or res.name, who, s, res.urn) for s in sources]
    entries.sort(key=lambda e: e[:3])  # the engine's order is the registrations' race
    told: set[frozenset] = set()
    fix = ("give each component a secret directory of its own (/etc/gpu-fleet/web/<component>) and "
           "mount that directory")
    for comp, who, src, urn in entries:
        for other, owho, osrc, _ in entries:
            pair = frozenset({(comp, src), (other, osrc)})
            if other == comp or pair in told:
                continue
            if contains(src, osrc) or contains(osrc, src):
                told.add(pair)
                same = "the same secret source as" if src == osrc else (
                    "a secret source that holds" if contains(src, osrc) else "a secret source inside")
                report_violation(
                    f"{who} mounts {src}, {same} {owho}'s {osrc}, so each can read the other's "
                    f"secrets; {fix}.", urn or None)
            elif looks_like_file(src) and contains(posixpath.dirname(src), osrc):
                told.add(pair)
                report_violation(
                    f"{who} mounts the secret file {src} from {posixpath.dirname(src)}, a directory that "
                    f"also holds {owho}'s secret {osrc}; {fix}.", urn or None)


# ---- web-readback (stack) ----------------------------------------------------------------------

OBSERVED = ("image_digest", "user", "read_only", "cap_eff", "no_new_privs", "memory_limit_bytes", "pids_max",
            "cpu_quota_us", "cpu_period_us", "mounts", "ports")
#: the rules' checks on a container's readback, in the resource policies' order
READBACK = (_image_observed, _user_observed, _rootfs_observed, _caps_observed, _nnp_observed,
            _limits_observed, _ports_observed, _mounts_observed, _key_observed)


def _problems(res: Res, who: str) -> Found:
    problems = res.get("problems")
    if not _known(problems):
        return
    problems = [str(P.reveal(p)) for p in _list(problems)]
    if problems:
        yield (f"{who} does not run as it declares (problems from its readback: {'; '.join(problems)}); "
               "re-create it with `pulumi up` and find what changed it outside the stack.")


def validate_readback(args, report_violation) -> None:
    """The readback as the engine holds it: a container's outputs after create or refresh
    (`observed`, `problems`), an image's pulled `digest`. A resource policy sees inputs only
    (the program passes `observed: None`); a stack policy sees the state's outputs for what
    this update leaves as it is, and the planned inputs (no readback) for what it changes,
    so it refuses a drifted container the provider would not repair, never the repair."""
    for res in stack_resources(args, CONTAINER, IMAGE):
        if res.type == IMAGE:
            for msg in _image_pulled(res, _who(res, "Image")):
                report_violation(msg, res.urn or None)
            continue
        who = _who(res)
        for msg in _problems(res, who):
            report_violation(msg, res.urn or None)
        obs = _observed(res)
        if obs is None or obs.get("exists") is False or obs.get("running") is False:
            continue  # nothing runs: what its problems say is the whole story
        obs = {**{k: P.UNKNOWN for k in OBSERVED}, **obs}  # what it does not record: not checked
        for check in READBACK:
            for msg in check(res, who, obs):
                report_violation(msg, res.urn or None)
