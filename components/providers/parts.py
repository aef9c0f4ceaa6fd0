"""What every host provider is made of: its props and steps, its errors, the record of its
inputs in its outputs, the host it acts on, and the wrapper that turns each engine entry point's
errors into one readable line. The providers themselves are in base.py (the family's root) and
beside it; this module holds no provider, so moving it moves nothing Pulumi's state names.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Sequence

from pulumi.dynamic import ResourceProvider
from pulumi.output import Unknown

from ..errors import FleetError
from ..transport import Connection, SshTarget
from ..transport.command import Piece, display
from ..transport.sequence import run_sequence
from ..transport.target import Result, acting_for

Props = dict[str, Any]
Observed = dict[str, Any]

@dataclass(frozen=True)
class Step:
    """One mutating command of a plan, with the reason it is needed."""

    argv: Sequence[Piece]
    why: str
    stdin: Optional[bytes] = None
    stdin_secret: bool = False

    def __str__(self) -> str:
        return f"{self.why}: {display(self.argv)}"


class NotConverged(FleetError):
    """After applying its plan, a host still differs from the desired state."""


class PlanRefused(FleetError):
    """The planner will not do what was asked (renumber an id, downgrade silently, ...)."""


class HostMoved(FleetError):
    """The stack gives a host's resources another address or port than their state records."""


#: output key holding the stack's values of the input keys the observed state reuses
INPUTS = "_inputs"


def target_of(props: Props) -> SshTarget:
    return SshTarget.from_dict(props["conn"])


def kind_of(provider: ResourceProvider) -> str:
    """'File', 'Account', 'CanaryJob', ...: the resource kind, for errors and the command log
    (a layer's subclass of a primitive's provider names the primitive: its `kind`)."""
    return getattr(provider, "kind", None) or type(provider).__name__.removesuffix("Provider")


def _address(address: str) -> str:
    """One spelling per address: DNS names ignore case and a trailing dot; IPs in canonical form."""
    a = str(address).strip().rstrip(".").lower()
    try:
        return ipaddress.ip_address(a.strip("[]")).compressed
    except ValueError:
        return a


def conn_change(kind: str, id_: str, olds: Props, news: Props) -> Optional[str]:
    """How the stack's `conn` differs from the one recorded in state, decided in diff (during
    preview, before any host is touched):

    - None: the same target;
    - "replace": another host name, so another object (deleted on the old host, created on the new);
    - "update": the same name, address and port reached another way (user, identity file,
      known_hosts, jump host, ssh config, timeout): the update re-probes through the new settings
      and records them; host-key checking refuses a new route that lands on another machine;
    - another address or port for the same name (a DNS name for an IP counts, it may resolve
      anywhere) raises HostMoved: the state lives on the machine at the old address.
    """
    old_conn, new_conn = olds.get("conn") or {}, news["conn"]
    if old_conn.get("name") != new_conn["name"]:
        return "replace"
    old, new = SshTarget.from_dict(old_conn), SshTarget.from_dict(new_conn)
    if old == new:
        return None
    moved = [f"conn.{k} {getattr(old, k)} -> {getattr(new, k)}"
             for k, same in (("address", _address(old.address) == _address(new.address)),
                             ("port", old.port == new.port)) if not same]
    if not moved:
        return "update"
    at = f"{old.address}:{old.port}"
    raise HostMoved(
        f"host {old.name}: {kind} {id_}: {', '.join(moved)}; refusing to move its state to another address\n"
        f"  why: what this resource did (and what it keeps to undo it) lives on the machine at {at}; "
        f"moving the state silently would either leave that behind there or undo it at "
        f"{new.address}:{new.port}, which may be another machine\n"
        f"  to move the host: take {old.name} out of the stack and run `pulumi up` (its resources are "
        f"rolled back at {at}), then add it back with the new address and run `pulumi up` again\n"
        f"  if the machine at {at} is gone for good: `pulumi state delete <urn>` for each of "
        f"{old.name}'s resources (`pulumi stack --show-urns --show-ids` lists them; this one's id is {id_})"
    )


def recorded_inputs(outs: Props) -> Props:
    """What read and delete work from: recorded outputs with the stack's shadowed inputs put back."""
    return {**outs, **(outs.get(INPUTS) or {})}


@contextlib.contextmanager
def _from_record(kind: str, id_: str, props: Props) -> Iterator[None]:
    """A key missing from a recorded state (written before outputs were always full) is a
    clear error with its remedy, not a KeyError from a probe."""
    try:
        yield
    except KeyError as e:
        key = e.args[0] if e.args else None
        if key in props:
            raise
        host = (props.get("conn") or {}).get("name", "?")
        raise FleetError(
            f"host {host}: {kind} {id_}: its recorded state lacks {key!r} (an earlier gpu-fleet's refresh "
            f"dropped it)\n"
            f"  run `pulumi up` once without --refresh: it records full outputs; then refresh or destroy "
            f"again (or, if the object is gone from the host for good, `pulumi state delete <urn>` it)"
        ) from None


def run_steps(conn: Connection, steps: Iterable[Step], then: Optional[Sequence[Piece]] = None) -> Optional[Result]:
    """Send planned steps in order, mutating (secret stdin masked), in as few round trips as
    they allow, and then the read-only `then` in the last: its result (transport/sequence.py).
    The first step that fails stops them with its own error."""
    return run_sequence(conn, list(steps), then)


def has_unknown(value: Any) -> bool:
    """Whether a value holds one the engine has not computed yet (a preview's unknown)."""
    if isinstance(value, Unknown):
        return True
    if isinstance(value, dict):
        return any(has_unknown(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_unknown(v) for v in value)
    return False


def normalize(value: Any) -> Any:
    """The engine hands numbers over as floats (22.0); give integers back their type."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def _entry(fn):
    """Provider entry point: normalized props in; our own errors out with a short traceback."""
    @functools.wraps(fn)
    def wrapper(self, *args):
        args = tuple(normalize(a) for a in args)
        try:
            with acting_for(_label(self, args)):
                return fn(self, *args)
        except FleetError as e:
            raise FleetError(str(e)) from None
    return wrapper


def _label(provider: ResourceProvider, args: tuple) -> str:
    """'File /etc/slurm/slurm.conf': what the command log says a command was sent for."""
    props = next((a for a in reversed(args) if isinstance(a, dict)), {})
    key = getattr(provider, "key", None)
    try:
        what = key(props) if key else ""
    except Exception:  # a label only; props a preview has not resolved yet
        what = ""
    return f"{kind_of(provider)} {what}".strip()
